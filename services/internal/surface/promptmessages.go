package surface

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// Prompt messages (docs/adr/0017): what a prompts/get of a listed prompt
// returns is what a host puts into the model's context when the user picks
// the prompt. For a prompt that declares no arguments the result is a
// function of nothing the client sends, so it is an item of the surface in
// form v2 (KindPromptMessages, named by the prompt's name), pinned exactly
// like the contents of a UI resource.

// getFields are the members of a prompts/get result a prompt messages
// item covers, with the JSON kind each must have: the messages themselves
// (each whole: role and content, whatever the content's type), the
// result's description, and its _meta but for the volatile keys.
var getFields = map[string]canonjson.Kind{
	"description": canonjson.String, "messages": canonjson.Array, "_meta": canonjson.Object,
}

var getNames = []string{"description", "messages", "_meta"}

// AddGetResult adds what a prompts/get of the prompt name returned (the
// result object exactly as a client reads it, never unwrapped, as
// AddPage) as the item KindPromptMessages named name: its messages array
// (each message whole), its description and its _meta (volatile keys
// left out). In form v1 it adds nothing. A result that is not an object
// with a messages array of objects, or that reads two ways, fails as a
// page does.
func (b *Builder) AddGetResult(name string, raw []byte) error {
	return b.namedResult(KindPromptMessages, name, raw, nil, 0, (*Builder).addGetResult)
}

// addGetResult writes the canonical form of a prompts/get result:
// {"_meta":{...},"description":"...","messages":[<message>, ...]}, the
// members present only when the server sent them (messages always).
func (b *Builder) addGetResult(name string, n canonjson.NodeID) *Error {
	d := b.d
	if name == "" {
		return &Error{Code: CodeMissingName, Msg: "prompt messages with no prompt name"}
	}
	r, perr := resultOf(d, n, false)
	if perr != nil {
		return perr
	}
	if d.Kind(r) != canonjson.Object {
		return &Error{Code: CodeUnknownFormat, Msg: "the prompts/get result is a " + d.Kind(r).String() + ", want an object"}
	}
	if err := foldedMembers(d, r, getNames...); err != nil {
		return err
	}
	arr, ok := d.Get(r, "messages")
	if !ok || d.Kind(arr) != canonjson.Array {
		return &Error{Code: CodeUnknownFormat, Msg: "the prompts/get result has no messages array"}
	}
	for el, i := d.First(arr), 0; i < d.Len(arr); el, i = d.Next(el), i+1 {
		if d.Kind(el) != canonjson.Object {
			return &Error{Code: CodeItemNotObject, Msg: "a message is a " + d.Kind(el).String() + ", want an object"}
		}
	}
	if b.kinds[KindPromptMessages].items >= b.lim.MaxItems {
		return &Error{Code: CodeTooManyItems, Msg: "more than the limit of " + itoa(b.lim.MaxItems) + " prompt messages"}
	}
	off := len(b.arena)
	if err := b.appendCovered(r, getFields, "the result's "); err != nil {
		return err
	}
	b.kinds[KindPromptMessages].items++
	b.pending = append(b.pending, pending{kind: KindPromptMessages, name: name, off: off, end: len(b.arena),
		start: int32(d.Offset(n)), stop: int32(d.Offset(n) + len(d.Raw(n))), hash: b.opt.Hash.Sum(b.arena[off:])})
	return nil
}

// HashGetResult hashes the prompts/get result raw of the prompt name as
// the item KindPromptMessages with opt: what a proxy compares with the
// approved item before it passes the messages on. ok is false in form v1,
// which pins no messages.
func HashGetResult(opt Options, name string, raw []byte) (h Digest, ok bool, err error) {
	if opt.Form < FormV2 {
		return Digest{}, false, nil
	}
	b := NewBuilder(opt)
	if err := b.AddGetResult(name, raw); err != nil {
		return Digest{}, false, err
	}
	items := b.LastPage()
	if len(items) != 1 {
		return Digest{}, false, &Error{Code: CodeUnknownFormat, Kind: KindPromptMessages, Item: name, Msg: "no prompt messages were read"}
	}
	return items[0].Hash, true, nil
}

// PromptTakesNoArguments reports whether a prompt definition, given as its
// raw JSON object (a span of a prompts/list page), declares no arguments
// at all: its arguments member is absent, null or an empty array. Only
// such a prompt's messages are pinned: a prompt with any argument, even an
// optional one, may answer a get that passes it differently from one that
// does not, so the proxy's own get could be told from an agent's. A
// definition that does not decode is reported as taking arguments (the
// listing that carries it fails on its own).
func PromptTakesNoArguments(raw []byte) bool {
	var d canonjson.Doc
	if d.Parse(raw, canonjson.DefaultLimits) != nil || d.Kind(canonjson.Root) != canonjson.Object {
		return false
	}
	for i := range d.Len(canonjson.Root) {
		k, v := d.Member(canonjson.Root, i)
		if !d.StringIs(k, "arguments") && !d.FoldsTo(k, "arguments") {
			continue
		}
		switch d.Kind(v) {
		case canonjson.Null:
		case canonjson.Array:
			if d.Len(v) > 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// diffPromptMessages classifies the change of a prompt's got messages: a
// message's text or any other member of a message, or a message added or
// removed, is prompt_messages_changed (matched by position: a host puts
// them into the context in order); the result's description is
// description_changed, its _meta as a prompt's.
func diffPromptMessages(cs []Change, o, n map[string]any) []Change {
	for _, key := range unionKeys(o, n) {
		x, y := o[key], n[key]
		if reflect.DeepEqual(x, y) {
			continue
		}
		switch key {
		case "messages":
			ol, _ := x.([]any)
			nl, _ := y.([]any)
			if len(ol) != len(nl) {
				cs = append(cs, change(ChangePromptMessagesChanged, "messages", fmt.Sprintf("%d messages → %d", len(ol), len(nl))))
			}
			for i := range min(len(ol), len(nl)) {
				if !reflect.DeepEqual(ol[i], nl[i]) {
					cs = append(cs, change(ChangePromptMessagesChanged, "messages["+strconv.Itoa(i)+"]", ""))
				}
			}
		case "description":
			cs = append(cs, change(ChangeDescription, key, textDelta(x, y)))
		case "_meta":
			cs = diffMeta(cs, KindPrompt, asMap(x), asMap(y))
		default:
			cs = append(cs, change(ChangeUnclassified, key, "no rule for this field"))
		}
	}
	return cs
}
