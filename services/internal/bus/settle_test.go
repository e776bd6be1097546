package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const (
	settleService = "settletest"
	settleDurable = "settletest"
)

var errTransient = errors.New("injected transient failure")

// failingJS fails every publish while fail is set, as a dead letter's
// publish fails while JetStream is unreachable.
type failingJS struct {
	jetstream.JetStream
	fail atomic.Bool
}

func (j *failingJS) Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if j.fail.Load() {
		return nil, errors.New("injected publish failure")
	}
	return j.JetStream.Publish(ctx, subj, data, opts...)
}

// delivery is what the handler returns for one delivery, and whether the
// dead letter's publish fails during it.
type delivery struct {
	err    error
	failDL bool
}

// TestSettler settles one message through each sequence of handler
// outcomes on a real consumer, and checks how each delivery was settled,
// what the server did with the message, and the dead letters published.
func TestSettler(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxDeliver int
		deliveries []delivery
		want       []bus.Outcome
		wantCode   string // the dead letter's code; "" for none
		wantTerm   string // the termination's reason; "" when not terminated
	}{
		{
			name:       "ack_on_success",
			maxDeliver: 3,
			deliveries: []delivery{{}},
			want:       []bus.Outcome{bus.Acked},
		},
		{
			name:       "poison_is_dead_lettered_and_terminated",
			maxDeliver: 3,
			deliveries: []delivery{{err: bus.Poisonf(bus.CodeSubjectMismatch, "event for tenant %q on another's subject", "globex")}},
			want:       []bus.Outcome{bus.DeadLettered},
			wantCode:   bus.CodeSubjectMismatch,
			wantTerm:   bus.CodeSubjectMismatch,
		},
		{
			name:       "poison_keeps_the_code_of_a_wrapped_error",
			maxDeliver: 3,
			deliveries: []delivery{{err: fmt.Errorf("decoding: %w", bus.Poison(bus.ValidID("tenant", "a b")))}},
			want:       []bus.Outcome{bus.DeadLettered},
			wantCode:   bus.CodeInvalidID,
			wantTerm:   bus.CodeInvalidID,
		},
		{
			name:       "transient_naks_then_retries_exhausted",
			maxDeliver: 3,
			deliveries: []delivery{{err: errTransient}, {err: errTransient}, {err: errTransient}},
			want:       []bus.Outcome{bus.Retried, bus.Retried, bus.DeadLettered},
			wantCode:   bus.CodeRetriesExhausted,
			wantTerm:   bus.CodeRetriesExhausted,
		},
		{
			name:       "transient_then_success",
			maxDeliver: 3,
			deliveries: []delivery{{err: errTransient}, {}},
			want:       []bus.Outcome{bus.Retried, bus.Acked},
		},
		{
			name:       "dead_letter_not_published_naks",
			maxDeliver: 3,
			deliveries: []delivery{
				{err: bus.Poisonf(bus.CodeMalformedEvent, "not protobuf"), failDL: true},
				{err: bus.Poisonf(bus.CodeMalformedEvent, "not protobuf")},
			},
			want:     []bus.Outcome{bus.Retried, bus.DeadLettered},
			wantCode: bus.CodeMalformedEvent,
			wantTerm: bus.CodeMalformedEvent,
		},
		{
			name:       "dead_letter_not_published_on_the_last_delivery_terminates",
			maxDeliver: 2,
			deliveries: []delivery{{err: errTransient}, {err: errTransient, failDL: true}},
			want:       []bus.Outcome{bus.Retried, bus.DeadLettered},
			wantTerm:   bus.CodeRetriesExhausted,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := natstest.StartBus(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			terms, err := b.NC.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + bus.StreamObservations + "." + settleDurable)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			cons, err := b.JS.CreateOrUpdateConsumer(ctx, bus.StreamObservations, jetstream.ConsumerConfig{
				Durable: settleDurable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
				MaxDeliver: tc.maxDeliver, FilterSubject: bus.ListObservationSubject("acme", "s1"),
			})
			if err != nil {
				t.Fatal(err)
			}
			js := &failingJS{JetStream: b.JS}
			var mu sync.Mutex
			var counted []string
			s, err := bus.NewSettler(bus.SettleConfig{
				Service: settleService, MaxDeliver: tc.maxDeliver, Timeout: 5 * time.Second,
				Backoff: bus.Backoff(10*time.Millisecond, 40*time.Millisecond),
			}, bus.SettleDeps{JS: js, Log: zerolog.Nop(), Metrics: func(o bus.Outcome, code string) {
				mu.Lock()
				defer mu.Unlock()
				counted = append(counted, strings.TrimSuffix(o.String()+" "+code, " "))
			}})
			if err != nil {
				t.Fatal(err)
			}
			ack, err := bus.Publish(ctx, b.JS, bus.ListObservationSubject("acme", "s1"), []byte("event"), "e1")
			if err != nil {
				t.Fatal(err)
			}

			var got []bus.Outcome
			for i, d := range tc.deliveries {
				msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				msg, ok := <-msgs.Messages()
				if !ok {
					t.Fatalf("delivery %d never came (%v)", i+1, msgs.Error())
				}
				md, err := msg.Metadata()
				if err != nil || md.NumDelivered != uint64(i+1) {
					t.Fatalf("delivery %d: metadata %+v, %v", i+1, md, err)
				}
				js.fail.Store(d.failDL)
				got = append(got, s.Settle(ctx, msg, d.err))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("outcomes %v, want %v", got, tc.want)
			}
			var wantCounted []string
			for _, o := range tc.want {
				c := o.String()
				if o == bus.DeadLettered {
					c += " " + tc.wantTerm
				}
				wantCounted = append(wantCounted, c)
			}
			mu.Lock()
			if !slices.Equal(counted, wantCounted) {
				t.Errorf("metrics told %q, want %q", counted, wantCounted)
			}
			mu.Unlock()

			// The server holds nothing more of the message: acked or terminated.
			poll.Eventually(t, 10*time.Second, func() error {
				info, err := cons.Info(ctx)
				if err != nil {
					return err
				}
				if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
					return fmt.Errorf("consumer has %d pending, %d unacked, %d redelivered; want none",
						info.NumPending, info.NumAckPending, info.NumRedelivered)
				}
				return nil
			})
			if tc.wantTerm != "" {
				adv, err := terms.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("no termination advisory: %v", err)
				}
				var a struct {
					StreamSeq uint64 `json:"stream_seq"`
					Reason    string `json:"reason"`
				}
				if err := json.Unmarshal(adv.Data, &a); err != nil {
					t.Fatal(err)
				}
				if a.StreamSeq != ack.Sequence || a.Reason != tc.wantTerm {
					t.Errorf("terminated seq %d reason %q, want %d %q", a.StreamSeq, a.Reason, ack.Sequence, tc.wantTerm)
				}
			} else if adv, err := terms.NextMsg(50 * time.Millisecond); err == nil {
				t.Errorf("terminated: %s", adv.Data)
			}

			dls := deadLetters(t, b.JS, settleService)
			if tc.wantCode == "" {
				if len(dls) != 0 {
					t.Fatalf("dead letters %v, want none", dls)
				}
				return
			}
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1: %v", len(dls), dls)
			}
			dl := dls[0]
			wantID := fmt.Sprintf("dead-%s-%s-%d", settleService, bus.StreamObservations, ack.Sequence)
			if dl.EventId != wantID || dl.ErrorCode != tc.wantCode || dl.Service != settleService ||
				dl.Subject != bus.ListObservationSubject("acme", "s1") || dl.StreamSequence != fmt.Sprint(ack.Sequence) ||
				dl.ErrorMessage == "" || strings.HasPrefix(dl.ErrorMessage, tc.wantCode) || dl.AtUnixMs == 0 {
				t.Errorf("dead letter %+v, want id %s code %s and a message without the code", dl, wantID, tc.wantCode)
			}
			if tc.wantCode == bus.CodeRetriesExhausted && !strings.Contains(dl.ErrorMessage, errTransient.Error()) {
				t.Errorf("dead letter message %q does not say what failed", dl.ErrorMessage)
			}
		})
	}
}

// deadLetters reads the dead letters of service from the admin stream,
// each checked to carry its event id as message id.
func deadLetters(t *testing.T, js jetstream.JetStream, service string) []*mcpdriftv1.DeadLetter {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, bus.StreamAdmin)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*mcpdriftv1.DeadLetter
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != bus.DeadLetterSubject(service) {
			continue
		}
		dl := new(mcpdriftv1.DeadLetter)
		if err := bus.UnmarshalJSON(m.Data, dl); err != nil {
			t.Fatalf("dead letter %s: %v", m.Data, err)
		}
		if id := m.Header.Get(nats.MsgIdHdr); id != dl.EventId {
			t.Errorf("dead letter %s published with message id %q", dl.EventId, id)
		}
		out = append(out, dl)
	}
	return out
}

func TestPoisonCarriesItsCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     string
		poison   bool
		sentence string
	}{
		{"poisonf", bus.Poisonf(bus.CodeInvalidTime, "event time %d ms", -1), bus.CodeInvalidTime, true, "event time -1 ms"},
		{"poison_of_a_coded_error", bus.Poison(bus.ValidID("server", "a.b")), bus.CodeInvalidID, true, `server "a.b" must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -`},
		{"poison_of_an_uncoded_error", bus.Poison(errors.New("cannot decode")), bus.CodeMalformedEvent, true, "cannot decode"},
		{"wrapped_poison", fmt.Errorf("call 2: %w", bus.Poisonf(bus.CodeSubjectMismatch, "other tenant")), bus.CodeSubjectMismatch, true, ""},
		{"transient", errTransient, "", false, ""},
		{"coded_but_not_poison", bus.ValidID("tenant", ""), bus.CodeInvalidID, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := coded.CodeOf(tc.err); got != tc.code {
				t.Errorf("CodeOf = %q, want %q", got, tc.code)
			}
			if got := bus.IsPoison(tc.err); got != tc.poison {
				t.Errorf("IsPoison = %v, want %v", got, tc.poison)
			}
			if tc.sentence != "" {
				if got := coded.MessageOf(tc.err); got != tc.sentence {
					t.Errorf("MessageOf = %q, want %q", got, tc.sentence)
				}
				if want := tc.code + ": " + tc.sentence; tc.err.Error() != want {
					t.Errorf("Error = %q, want %q", tc.err.Error(), want)
				}
			}
		})
	}
}

func TestBackoffDoublesUpToItsLimit(t *testing.T) {
	b := bus.Backoff(100*time.Millisecond, time.Second)
	for delivered, want := range map[uint64]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond,
		2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 1000: time.Second} {
		if got := b(delivered); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", delivered, got, want)
		}
	}
}

func TestNewSettlerChecksItsConfig(t *testing.T) {
	_, err := bus.NewSettler(bus.SettleConfig{Service: "a.b"}, bus.SettleDeps{})
	for _, want := range []string{"service", "Backoff", "timeout", "JS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewSettler = %v, want it to name %s", err, want)
		}
	}
}

// TestDocsListEveryDeadLetterCode: docs/bus.md lists the dead-letter codes,
// every one and in the order of bus.DeadLetterCodes.
func TestDocsListEveryDeadLetterCode(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/bus.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Settlement and dead letters\n")
	if !ok {
		t.Fatal(`docs/bus.md has no section "Settlement and dead letters"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, table, ok := strings.Cut(section, "\n| code | meaning | from |\n|---|---|---|\n")
	if !ok {
		t.Fatal("docs/bus.md: no table of dead-letter codes in its section on dead letters")
	}
	var listed []string
	for line := range strings.Lines(table) {
		code, ok := strings.CutPrefix(line, "| `")
		if !ok {
			break
		}
		code, _, _ = strings.Cut(code, "`")
		listed = append(listed, code)
	}
	if !slices.Equal(listed, bus.DeadLetterCodes) {
		t.Errorf("docs/bus.md lists the codes %q, bus.DeadLetterCodes are %q", listed, bus.DeadLetterCodes)
	}
}

// TestSettlerHandBackAndInProgress: a message kept in progress is not
// delivered again after AckWait; one handed back is delivered again at once.
func TestSettlerHandBackAndInProgress(t *testing.T) {
	b := natstest.StartBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ackWait = time.Second
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, bus.StreamObservations, jetstream.ConsumerConfig{
		Durable: settleDurable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		FilterSubject: bus.ListObservationSubject("acme", "s1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var handedBack atomic.Int32
	s, err := bus.NewSettler(bus.SettleConfig{Service: settleService, MaxDeliver: -1, Timeout: 5 * time.Second,
		Backoff: bus.Backoff(10*time.Millisecond, 40*time.Millisecond)},
		bus.SettleDeps{JS: b.JS, Log: zerolog.Nop(), Metrics: func(o bus.Outcome, _ string) {
			if o == bus.HandedBack {
				handedBack.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(ctx, b.JS, bus.ListObservationSubject("acme", "s1"), []byte("event"), "e1"); err != nil {
		t.Fatal(err)
	}
	fetch := func(wait time.Duration) jetstream.Msg {
		t.Helper()
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		return <-msgs.Messages()
	}
	msg := fetch(10 * time.Second)
	if msg == nil {
		t.Fatal("no delivery")
	}
	// Kept in progress for three AckWaits: never delivered again meanwhile.
	keep := time.NewTicker(ackWait / 4)
	defer keep.Stop()
	for end := time.Now().Add(3 * ackWait); time.Now().Before(end); <-keep.C {
		s.InProgress(msg)
		if again := fetch(10 * time.Millisecond); again != nil {
			md, _ := again.Metadata()
			t.Fatalf("a message in progress was delivered again (%+v)", md)
		}
	}
	if o := s.HandBack(msg); o != bus.HandedBack || handedBack.Load() != 1 {
		t.Fatalf("HandBack = %v, counted %d", o, handedBack.Load())
	}
	began := time.Now()
	again := fetch(10 * time.Second)
	if again == nil {
		t.Fatal("a message handed back was not delivered again")
	}
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 || time.Since(began) >= ackWait {
		t.Fatalf("delivered again after %v: %+v, %v; want the second delivery at once", time.Since(began), md, err)
	}
	if o := s.Settle(ctx, again, nil); o != bus.Acked {
		t.Fatalf("Settle = %v, want acked", o)
	}
}
