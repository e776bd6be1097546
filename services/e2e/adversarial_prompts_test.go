package e2e

import (
	"strings"
	"time"
)

// promptsCases: the server keeps its prompts listing, byte for byte, and
// swaps what prompts/get of its argument-less prompt "greet" returns (the
// messages a host puts into the model's context) for an injection that
// carries the PWNED marker (docs/adr/0017). The agent gets the approved
// messages before the swap and never the swapped ones, and the drift
// service sees the change.
func promptsCases() []advCase {
	return []advCase{
		promptSwapCase("prompts_messages_swapped_stdio", advStdio, "ts"),
		promptSwapCase("prompts_messages_swapped_http", advHTTP, "go"),
		promptSwapCase("prompts_messages_swapped_sse", advSSE, "ts"),
		promptSwapCase("prompts_messages_swapped_sse_go", advSSE, "go"),
		promptSwapCase("prompts_messages_swapped_stateless", advStateless, "ts"),
	}
}

// promptsHook keeps the prompts listing as approved whatever the phase;
// prompts/get is the upstream's own, which swaps the messages once the
// upstream rug-pulled.
func promptsHook(u *upstream, m upMsg) *reply {
	if m.Method == "prompts/list" {
		return &reply{msgs: [][]byte{rpcResult(m.ID, `{"prompts":[`+promptGreet+`]}`)}}
	}
	return nil
}

func promptSwapCase(name, transport, client string) advCase {
	return advCase{name: name, transport: transport, client: client, class: "prompt messages",
		setup: func(u *upstream) { u.hook = promptsHook },
		run: func(x *advRun) {
			var got string
			var err error
			deadline := time.Now().Add(20 * time.Second)
			for {
				// The approved messages are served once the verdict on the
				// surface, messages included, is in.
				if got, err = x.a.getPrompt("greet"); err == nil && strings.Contains(got, "Hello.") {
					break
				}
				if time.Now().After(deadline) {
					x.Fatalf("the approved prompt messages were never served: %.300s %v", got, err)
				}
				time.Sleep(150 * time.Millisecond)
			}
			x.u.rug()
			got, err = x.a.getPrompt("greet")
			// (The code, prompt_messages_not_approved, is in the error's
			// data, which the SDKs do not show.)
			if err == nil || !strings.Contains(err.Error()+got, "is not the approved one") {
				x.Errorf("the get after the swap: %.300s %v; want prompt_messages_not_approved", got, err)
			}
			// The drift service hears of the swapped messages.
			x.waitStatus("changed")
			got, err = x.a.getPrompt("greet")
			x.Logf("get after the verdict: %.200s %v", got, err)
			x.attack()
		}}
}
