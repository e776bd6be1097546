package canonjson

import "testing"

// TestBorrowReturn: a Doc given back and borrowed again parses anew, and
// what Raw gave out before stays what it was.
func TestBorrowReturn(t *testing.T) {
	src := []byte(`{"name":"read","arguments":{"path":"/tmp/x"}}`)
	d := Borrow()
	if err := d.Parse(src, Limits{}); err != nil {
		t.Fatal(err)
	}
	a, ok := d.Get(Root, "arguments")
	if !ok {
		t.Fatal("no arguments")
	}
	raw := d.Raw(a)
	Return(d)
	for range 100 { // the pool may hand back the same Doc or a new one
		d := Borrow()
		if err := d.Parse([]byte(`{"x":[true,false,null],"y":1,"z":"w"}`), Limits{}); err != nil {
			t.Fatal(err)
		}
		if d.Kind(Root) != Object || d.Len(Root) != 3 {
			t.Fatalf("a borrowed Doc parsed %s of %d", d.Kind(Root), d.Len(Root))
		}
		if _, ok := d.Get(Root, "arguments"); ok {
			t.Fatal("a borrowed Doc still answers for the document before")
		}
		Return(d)
	}
	if string(raw) != `{"path":"/tmp/x"}` {
		t.Errorf("Raw after Return: %s", raw)
	}
	Return(nil) // allowed
	big := Borrow()
	big.nodes = make([]node, maxPooledNodes+1)
	Return(big) // let go, not kept
}
