package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

var (
	runCommand = &tools.Tool{Name: "run_command", Annotations: tools.Annotations{Destructive: true}}
	readFile   = &tools.Tool{Name: "read_file", Source: tools.SourceBuiltin, Annotations: tools.Annotations{ReadOnly: true}}
	payments   = &tools.Tool{Name: "payments_charge", Source: tools.SourceHTTP, Annotations: tools.Annotations{OpenWorld: true}}
	builder    = &engine.Identity{ID: "system:serviceaccount:agents:builder", Groups: []string{"agents"}, Method: engine.MethodJWT,
		Claims: map[string]any{"kubernetes.io": map[string]any{"namespace": "agents"}}}
	alice = &engine.Identity{ID: "alice", Groups: []string{"humans", "admins"}, Method: engine.MethodToken}
)

func mustCompile(t testing.TB, rules ...policy.Rule) *policy.Set {
	t.Helper()
	s, err := policy.Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTheDocumentedExample: the and the docs' example does what it
// says.
func TestTheDocumentedExample(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, policy.Rule{Name: "commands", Effect: policy.Deny, Message: "only go, git and ls may run",
		When: `tool.name == "run_command" && !(args.argv[0] in ["go", "git", "ls"])`})
	for argv, deny := range map[string]bool{`["git","status"]`: false, `["go","test"]`: false, `["curl","evil.example"]`: true, `["sh","-c","git"]`: true} {
		v := s.Decide(context.Background(), builder, runCommand, json.RawMessage(`{"argv":`+argv+`}`))
		if (v.Effect == engine.Deny) != deny || (deny && (v.Rule != "commands" || v.Reason != "only go, git and ls may run")) {
			t.Errorf("argv %s: %+v; want deny %v", argv, v, deny)
		}
	}
	if v := s.Decide(context.Background(), builder, readFile, json.RawMessage(`{"path":"a"}`)); v.Effect == engine.Deny {
		t.Errorf("another tool: %+v", v)
	}
}

// TestRulesSeeCallerToolAndArgs: every variable a rule may read, and the
// first rule that holds decides.
func TestRulesSeeCallerToolAndArgs(t *testing.T) {
	t.Parallel()
	s := mustCompile(t,
		policy.Rule{Name: "admins", Effect: policy.Allow, When: `"admins" in caller.groups`},
		policy.Rule{Name: "amounts", Effect: policy.Deny, Message: "charges of 100 or more need a human",
			When: `tool.source == "http" && tool.annotations.open_world && args.amount >= 100`},
		policy.Rule{Name: "docs-only", Effect: policy.Deny, Message: "read only under docs/",
			When: `tool.name == "read_file" && caller.claims["kubernetes.io"].namespace == "agents" && !args.path.startsWith("docs/")`},
		policy.Rule{Name: "jwt-only-destroys", Effect: policy.Deny, Message: "only service accounts may run commands",
			When: `tool.annotations.destructive && caller.method != "jwt"`},
	)
	for _, c := range []struct {
		who  *engine.Identity
		tool *tools.Tool
		args string
		rule string // "" when allowed
	}{
		{builder, payments, `{"amount":99}`, ""},
		{builder, payments, `{"amount":100}`, "amounts"},
		{alice, payments, `{"amount":5000}`, ""}, // admins first
		{builder, readFile, `{"path":"docs/a.md"}`, ""},
		{builder, readFile, `{"path":"secrets/key"}`, "docs-only"},
		{&engine.Identity{ID: "bob"}, runCommand, `{"argv":["ls"]}`, "jwt-only-destroys"},
		{builder, runCommand, `{"argv":["ls"]}`, ""},
	} {
		v := s.Decide(context.Background(), c.who, c.tool, json.RawMessage(c.args))
		if (v.Effect == engine.Deny) != (c.rule != "") || (c.rule != "" && v.Rule != c.rule) {
			t.Errorf("%s calling %s %s: %+v; want rule %q", c.who.ID, c.tool.Name, c.args, v, c.rule)
		}
	}
}

// TestEvaluationErrorsFailClosed: a deny rule that cannot be evaluated (a
// missing argument, the cost limit) denies, saying why; an allow rule that
// cannot be evaluated does not allow.
func TestEvaluationErrorsFailClosed(t *testing.T) {
	t.Parallel()
	deny := mustCompile(t, policy.Rule{Name: "argv", Effect: policy.Deny, Message: "only git", When: `args.argv[0] != "git"`})
	v := deny.Decide(context.Background(), alice, runCommand, json.RawMessage(`{}`))
	if v.Effect != engine.Deny || !strings.Contains(v.Reason, "could not be evaluated") {
		t.Errorf("a deny rule over a missing argument: %+v; want it to deny, saying why", v)
	}
	allow := mustCompile(t,
		policy.Rule{Name: "allow-broken", Effect: policy.Allow, When: `args.missing == 1`},
		policy.Rule{Name: "then-deny", Effect: policy.Deny, Message: "no", When: `true`})
	if v := allow.Decide(context.Background(), alice, runCommand, json.RawMessage(`{}`)); v.Effect != engine.Deny || v.Rule != "then-deny" {
		t.Errorf("an allow rule that errs: %+v; want the next rule to decide", v)
	}
	// The cost limit: a quadratic walk of a long list.
	costly := mustCompile(t, policy.Rule{Name: "costly", Effect: policy.Deny, Message: "too costly",
		When: `args.xs.exists(x, args.xs.exists(y, x + y == -1))`})
	xs := make([]int, 2000)
	b, _ := json.Marshal(map[string]any{"xs": xs})
	if v := costly.Decide(context.Background(), alice, runCommand, b); v.Effect != engine.Deny || !strings.Contains(v.Reason, "cost") {
		t.Errorf("a rule over its cost limit: %+v; want it to deny, naming the limit", v)
	}
}

// TestCompileErrors: a rule that cannot run is refused at load, naming the
// rule and, for an expression, the position.
func TestCompileErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rules []policy.Rule
		want  string
	}{
		{[]policy.Rule{{Name: "typo", Effect: policy.Deny, Message: "m", When: `tool.name == "x" && arg.y`}}, `policy "typo": ERROR: <input>:1:21: undeclared reference to 'arg' (did you mean 'args'?)`},
		{[]policy.Rule{{Name: "syntax", Effect: policy.Deny, Message: "m", When: `tool.name ==`}}, `policy "syntax": ERROR: <input>:1:`},
		{[]policy.Rule{{Name: "not-bool", Effect: policy.Deny, Message: "m", When: `"text"`}}, `policy "not-bool": when is of type string; want bool`},
		{[]policy.Rule{{Name: "effect", Effect: "maybe", When: `true`}}, `policy "effect": effect "maybe"`},
		{[]policy.Rule{{Name: "quiet", Effect: policy.Deny, When: `true`}}, `policy "quiet": a deny rule needs a message`},
		{[]policy.Rule{{Effect: policy.Allow, When: `true`}}, `policies[0]: the rule has no name`},
		{[]policy.Rule{{Name: "a", Effect: policy.Allow, When: `true`}, {Name: "a", Effect: policy.Allow, When: `true`}}, `policy "a": two rules have this name`},
		{[]policy.Rule{{Name: "empty", Effect: policy.Allow, When: ` `}}, `policy "empty": when is empty`},
		// caller and tool are maps to CEL's checker, so their fields are
		// checked by name: a misspelt one failed every call's evaluation.
		{[]policy.Rule{{Name: "field", Effect: policy.Deny, Message: "m", When: `tool.name == "echo" && tool.nme == "x"`}}, `policy "field": ERROR: <input>:1:28: tool has no field 'nme' (its fields: annotations, name, source)`},
		{[]policy.Rule{{Name: "has", Effect: policy.Deny, Message: "m", When: `has(caller.group)`}}, `policy "has": ERROR: <input>:1:4: caller has no field 'group' (its fields: claims, groups, id, method)`},
		{[]policy.Rule{{Name: "index", Effect: policy.Deny, Message: "m", When: `caller["ID"] == "x"`}}, `policy "index": ERROR: <input>:1:7: caller has no field 'ID'`},
		{[]policy.Rule{{Name: "annotation", Effect: policy.Deny, Message: "m", When: `tool.annotations.readonly`}}, `policy "annotation": ERROR: <input>:1:17: tool.annotations has no field 'readonly' (its fields: destructive, idempotent, open_world, read_only)`},
		{[]policy.Rule{{Name: "string", Effect: policy.Deny, Message: "m", When: `tool.name`}}, `policy "string": when is of type string; want bool`},
	} {
		if _, err := policy.Compile(c.rules); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error containing %q", c.rules, err, c.want)
		}
	}
}

// TestLive: a Live allows everything until a Set is swapped in, and tells
// whether a swap changed the rules.
func TestLive(t *testing.T) {
	t.Parallel()
	var l policy.Live
	if l.Swap(mustCompile(t)) {
		t.Error("swapping no rules for none is a change")
	}
	if v := l.Decide(context.Background(), alice, runCommand, json.RawMessage(`{}`)); v.Effect == engine.Deny {
		t.Errorf("an empty Live denied: %+v", v)
	}
	rules := []policy.Rule{{Name: "no", Effect: policy.Deny, Message: "no", When: `true`}}
	if !l.Swap(mustCompile(t, rules...)) || l.Swap(mustCompile(t, rules...)) {
		t.Error("Swap did not tell a change from the same rules")
	}
	if v := l.Decide(context.Background(), alice, runCommand, json.RawMessage(`{}`)); v.Effect != engine.Deny {
		t.Errorf("after the swap: %+v", v)
	}
}

// BenchmarkEvaluate is a call's cost of 10 and 100 rules, none of which
// holds (so every one is evaluated), beside none.
//
//	go test ./policy -run '^$' -bench Evaluate -count 6 | tee policy.txt && benchstat policy.txt
func BenchmarkEvaluate(b *testing.B) {
	args := json.RawMessage(`{"argv":["git","status"],"workdir":"src"}`)
	for _, n := range []int{0, 10, 100} {
		rules := make([]policy.Rule, n)
		for i := range rules {
			rules[i] = policy.Rule{Name: fmt.Sprintf("r%d", i), Effect: policy.Deny, Message: "no",
				When: fmt.Sprintf(`tool.name == "run_command" && args.argv[0] == "tool%d" && "admins" in caller.groups`, i)}
		}
		s := mustCompile(b, rules...)
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v := s.Decide(context.Background(), alice, runCommand, args); v.Effect == engine.Deny {
					b.Fatal(v)
				}
			}
		})
	}
}

// discard is a Sink that keeps nothing.
type discard struct{}

func (discard) Send(*toolwirev1.ExecuteBatchResponse) error { return nil }

// BenchmarkOneCallBatch is a one-call batch of echo through the engine,
// in process, with no policy, and with 10 and 100 rules none of which
// holds: the ratio of policy evaluation to the call's own cost.
//
//	go test ./policy -run '^$' -bench OneCallBatch -count 6 | tee batch.txt && benchstat batch.txt
func BenchmarkOneCallBatch(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: `{"text":"hello"}`}}}
	ctx := engine.WithIdentity(context.Background(), alice)
	for _, n := range []int{-1, 10, 100} {
		deps := engine.Deps{Logger: slog.New(slog.DiscardHandler)}
		name := "policy=none"
		if n >= 0 {
			rules := make([]policy.Rule, n)
			for i := range rules {
				rules[i] = policy.Rule{Name: fmt.Sprintf("r%d", i), Effect: policy.Deny, Message: "no",
					When: fmt.Sprintf(`tool.name == "echo" && args.text == "word%d" && "admins" in caller.groups`, i)}
			}
			var live policy.Live
			live.Swap(mustCompile(b, rules...))
			set, err := policy.New(nil, &live, nil)
			if err != nil {
				b.Fatal(err)
			}
			deps.Admission = set
			name = fmt.Sprintf("rules=%d", n)
		}
		eng := engine.New(engine.Config{}, deps)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := eng.Run(ctx, reg.Snapshot(), req, discard{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		eng.Close()
	}
}

// TestRequireApproval: a require_approval rule that holds asks the engine
// to hold the call, its message the reason (a default when it has none).
func TestRequireApproval(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, policy.Rule{Name: "big-charges", Effect: policy.RequireApproval, When: `tool.name == "payments_charge" && args.amount >= 1000`})
	if v := s.Decide(context.Background(), alice, payments, json.RawMessage(`{"amount":5000}`)); v.Effect != engine.Hold || v.Rule != "big-charges" || v.Reason != "a person must approve this call" {
		t.Errorf("a big charge: %+v; want it held for approval", v)
	}
	if v := s.Decide(context.Background(), alice, payments, json.RawMessage(`{"amount":5}`)); v.Effect != engine.Allow {
		t.Errorf("a small charge: %+v", v)
	}
	// One that cannot be evaluated denies (no one is asked about what the
	// rule could not read), saying why, though it has no message.
	v := s.Decide(context.Background(), alice, payments, json.RawMessage(`{"amount":"5000"}`))
	if v.Effect != engine.Deny || v.Rule != "big-charges" || !strings.HasPrefix(v.Reason, "the policy could not be evaluated: no such overload") {
		t.Errorf("a charge the rule cannot read: %+v; want it denied, saying why", v)
	}
}

// TestNumbersADoubleCannotHold: a rule reads a number as the tool will,
// or not at all. An integer past 2^53 that a double would round to its
// neighbour (here an account ID, sent one off the allowed one) is
// compared exactly, and a number no rule can read exactly fails the rules
// that read it (a deny rule denies, an allow rule does not hold) and no
// other.
func TestNumbersADoubleCannotHold(t *testing.T) {
	t.Parallel()
	s := mustCompile(t,
		policy.Rule{Name: "big-spender", Effect: policy.Allow, When: `tool.name == "payments_charge" && args.amount >= 100.0 && caller.id == "alice"`},
		policy.Rule{Name: "one-account", Effect: policy.Deny, Message: "charge only account 1234567890123456789",
			When: `tool.name == "payments_charge" && args.account != 1234567890123456789`},
		policy.Rule{Name: "small", Effect: policy.Deny, Message: "amounts below 1 are refused", When: `args.amount < 1`})
	for _, c := range []struct {
		args string
		who  *engine.Identity
		rule string // "" when allowed
		why  string // in the reason
	}{
		{`{"account":1234567890123456789,"amount":5}`, builder, "", ""},
		{`{"account":1234567890123456788,"amount":5}`, builder, "one-account", ""}, // the same double as ...789
		{`{"account":1234567890123456790,"amount":5}`, builder, "one-account", ""},
		{`{"account":-1234567890123456789,"amount":5}`, builder, "one-account", ""},
		{`{"account":12345678901234567890123,"amount":5}`, builder, "one-account", "cannot hold exactly"},
		{`{"account":1.234567890123456789e18,"amount":5}`, builder, "one-account", "cannot hold exactly"},
		{`{"account":1234567890123456789,"amount":1e400}`, builder, "small", "beyond a double's range"},
		{`{"account":1234567890123456789,"amount":1e-400}`, builder, "small", "too small for a double"},
		{`{"account":1234567890123456789,"amount":0.5}`, builder, "small", ""},
		{`{"account":1234567890123456789,"amount":9007199254740993}`, builder, "", ""}, // compared with a double
		// An allow rule that cannot read the amount does not hold.
		{`{"account":1234567890123456788,"amount":1e400}`, alice, "one-account", ""},
		{`{"account":1,"amount":1000}`, alice, "", ""},
		{`{"account":1,"amount":9007199254740993}`, alice, "", ""}, // an int against 100.0
	} {
		v := s.Decide(context.Background(), c.who, payments, json.RawMessage(c.args))
		if (v.Effect == engine.Deny) != (c.rule != "") || (c.rule != "" && v.Rule != c.rule) || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: %+v; want rule %q, a reason with %q", c.args, v, c.rule, c.why)
		}
	}
	// A rule that does not read the number is not affected by it.
	if v := s.Decide(context.Background(), builder, readFile, json.RawMessage(`{"amount":5,"n":1e400}`)); v.Effect != engine.Allow {
		t.Errorf("a number no rule reads: %+v", v)
	}
}

// TestArgumentsNoRuleCanRead: arguments that are not a JSON object fail
// every rule alike, for the same reason, an allow rule before a deny rule
// included.
func TestArgumentsNoRuleCanRead(t *testing.T) {
	t.Parallel()
	s := mustCompile(t,
		policy.Rule{Name: "allow", Effect: policy.Allow, When: `caller.id == "alice"`},
		policy.Rule{Name: "deny", Effect: policy.Deny, Message: "no", When: `false`})
	for _, args := range []string{`[1]`, `{"a":1} {}`, `{"a":`} {
		v := s.Decide(context.Background(), alice, readFile, json.RawMessage(args))
		if v.Effect != engine.Deny || v.Rule != "deny" || !strings.Contains(v.Reason, "not a JSON object") {
			t.Errorf("%s: %+v; want rule deny, saying the arguments are not a JSON object", args, v)
		}
	}
}
