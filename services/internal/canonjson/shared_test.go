package canonjson

import (
	"bytes"
	"errors"
	"testing"
)

func TestStrictIn(t *testing.T) {
	src := []byte(`{"a":[1,9007199254740993],"b":2,"c":{"d":1e999}}`)
	var strict Doc
	serr := strict.Parse(src, Limits{})
	var d Doc
	if err := d.Parse(src, Limits{LaxNumbers: true}); err != nil {
		t.Fatalf("lax parse: %v", err)
	}
	var want *Error
	if !errors.As(serr, &want) || want.Code != CodeNumberInexact {
		t.Fatalf("strict parse: %v, want %s", serr, CodeNumberInexact)
	}
	var got *Error
	if err := d.StrictIn(Root); !errors.As(err, &got) || got.Code != want.Code || got.Offset != want.Offset {
		t.Errorf("StrictIn(root) = %v, want the strict parse's %v", err, serr)
	}
	for key, code := range map[string]Code{"a": CodeNumberInexact, "b": "", "c": CodeNumberOutOfRange} {
		n, _ := d.Get(Root, key)
		err := d.StrictIn(n)
		switch {
		case code == "" && err != nil:
			t.Errorf("StrictIn(%s) = %v, want nil", key, err)
		case code != "" && (!errors.As(err, &got) || got.Code != code):
			t.Errorf("StrictIn(%s) = %v, want %s", key, err, code)
		}
	}
	// A reused Doc forgets the numbers of its last parse.
	if err := d.Parse([]byte(`[1,2]`), Limits{LaxNumbers: true}); err != nil || d.StrictIn(Root) != nil {
		t.Errorf("after a clean parse: %v, StrictIn %v", err, d.StrictIn(Root))
	}
}

func TestRebase(t *testing.T) {
	src := []byte(`{"k":"v"}`)
	var d Doc
	if err := d.Parse(src, Limits{}); err != nil {
		t.Fatal(err)
	}
	cp := bytes.Clone(src)
	d.Rebase(cp)
	copy(src, `{"x":"y"}`) // the old buffer is reused by its owner
	if v, ok := d.Get(Root, "k"); !ok || d.Text(v) != "v" {
		t.Errorf("after Rebase the Doc reads %q", d.Source())
	}
	defer func() {
		if recover() == nil {
			t.Error("Rebase onto bytes of another length did not panic")
		}
	}()
	d.Rebase(cp[:3])
}
