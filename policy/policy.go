// Package policy is toolwire's one admission vocabulary: who may call
// what with which arguments. Rules, the engine.Admission a server runs
// with, is one ordered set answering one verdict (allow; deny with a
// reason; hold for a person's approval): each caller's Permissions by tool
// name, then the policies, rules in CEL (cel.dev/cel-go) over the caller's
// identity, the tool and the validated arguments, such as
//
//	tool.name == "run_command" && !(args.argv[0] in ["go", "git", "ls"])
//
// then the approval rules (ApprovalRule). Permissions and approval rules
// name tools and callers one way (match). The engine asks the set once per
// call, after the call's arguments are validated and before it takes an
// idempotency key or a slot, and by name alone when it lists tools.
// Policies are compiled and type-checked when the configuration is loaded,
// so a rule that cannot run is an error naming it and the position in its
// expression; evaluation is bounded by CEL's cost limit. Live holds the
// compiled policies in force (a Set), which a reload swaps.
//
// It knows no transport: it must not import gRPC or any surface.
package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/tools"
)

// Rule is one entry of the config's "policies" list.
type Rule struct {
	// Name names the rule in results (details), logs and errors.
	Name string `json:"name"`
	// When is the rule's condition, a CEL expression of type bool over
	// caller (id, groups, claims, method), tool (name, source,
	// annotations: read_only, destructive, idempotent, open_world) and
	// args (the call's validated arguments, a JSON object).
	When string `json:"when"`
	// Effect is what the rule does to a call its condition holds for:
	// "allow" (the call goes on; later rules are not asked), "deny", or
	// "require_approval" (the call waits for a person's ResolveApproval,
	// Message as the reason told with the wait).
	Effect string `json:"effect"`
	// Message is what the model reads of a denied call: say what is
	// allowed instead.
	Message string `json:"message"`
}

// Config is the policy feature's configuration: the config file's
// "policies" list, asked in order and reloaded live, and its "approvals"
// list, read at start. (The permissions sit in the file's auth section:
// auth.CallerConfig.Permissions.)
type Config struct {
	Policies  []Rule         `json:"policies"`
	Approvals []ApprovalRule `json:"approvals"`
}

// The effects a rule may have.
const (
	Allow           = "allow"
	Deny            = "deny"
	RequireApproval = "require_approval"
)

// CostLimit bounds the work of evaluating one rule with loops or regular
// expressions (see mayRunAway) for one call, in CEL's cost units (about
// one per operation, more for walking lists and strings); an evaluation
// that passes it fails, which denies the call when the rule denies (see
// Set.Evaluate).
const CostLimit = 100_000

// Set is a compiled list of rules. The zero Set (no rules) allows every
// call. It is safe for concurrent use.
type Set struct {
	rules []compiled
}

type compiled struct {
	Rule
	prg    cel.Program
	effect engine.Effect // the verdict's, of Rule.Effect
}

// env is the CEL environment every rule is compiled in.
var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("caller", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		panic(err) // the declarations are constants
	}
	return e
}()

// compileMu makes compiling one rule at a time: cel-go's type checker
// (v0.33) clones the shared Env's declarations for a comprehension without
// a lock, which the race detector catches when two Compiles run at once.
// Compiling happens at start and on reload, so the lock costs nothing on a
// call's path.
var compileMu sync.Mutex

// Compile compiles and type-checks rules, in order. An error names the
// first bad rule and, for an expression, CEL's description of what is
// wrong and where ("ERROR: <input>:1:12: undeclared reference to 'arg'").
func Compile(rules []Rule) (*Set, error) {
	s := &Set{}
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("policies[%d]: the rule has no name", i)
		case seen[r.Name]:
			return nil, fmt.Errorf("policy %q: two rules have this name", r.Name)
		case r.Effect != Allow && r.Effect != Deny && r.Effect != RequireApproval:
			return nil, fmt.Errorf("policy %q: effect %q: want %q, %q or %q", r.Name, r.Effect, Allow, Deny, RequireApproval)
		case r.Effect == Deny && r.Message == "":
			return nil, fmt.Errorf("policy %q: a deny rule needs a message: the model reads it to know what to do instead", r.Name)
		case strings.TrimSpace(r.When) == "":
			return nil, fmt.Errorf("policy %q: when is empty", r.Name)
		}
		seen[r.Name] = true
		compileMu.Lock() // cel-go's checker races with itself on a shared Env (comprehensions)
		ast, iss := env.Compile(r.When)
		compileMu.Unlock()
		if iss.Err() != nil {
			return nil, fmt.Errorf("policy %q: %s", r.Name, iss.Err())
		}
		t, err := checkFields(ast)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %v", r.Name, err)
		}
		if !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
			return nil, fmt.Errorf("policy %q: when is of type %s; want bool", r.Name, t)
		}
		opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
		if mayRunAway(ast) {
			opts = append(opts, cel.CostLimit(CostLimit))
		}
		prg, err := env.Program(ast, opts...)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %v", r.Name, err)
		}
		effect := engine.Allow
		switch r.Effect {
		case Deny:
			effect = engine.Deny
		case RequireApproval:
			effect = engine.Hold
		}
		s.rules = append(s.rules, compiled{Rule: r, prg: prg, effect: effect})
	}
	return s, nil
}

// mayRunAway reports whether a rule's work can grow faster than its
// arguments' size: a comprehension (all, exists, map, filter: loops, which
// nest), or a regular expression. Those are evaluated under CostLimit;
// the rest, whose work is linear in the arguments (bounded by
// max_argument_bytes), without the cost tracking, which is most of a
// simple rule's cost.
func mayRunAway(a *cel.Ast) bool {
	found := false
	celast.PreOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.ComprehensionKind:
			found = true
		case celast.CallKind:
			if e.AsCall().FunctionName() == "matches" {
				found = true
			}
		}
	}))
	return found
}

// Len is the number of rules in s; 0 for nil.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Decide asks s's rules in order about a call of t with args by caller;
// the first whose condition holds decides, and when none does the call
// goes on (Allow). A rule whose evaluation fails (a missing argument, the
// cost limit) is treated as holding when it denies and as not holding when
// it allows, so an error never lets through what a rule meant to stop.
func (s *Set) Decide(_ context.Context, caller *engine.Identity, t *tools.Tool, args json.RawMessage) engine.Verdict {
	if s == nil || len(s.rules) == 0 {
		return engine.Verdict{}
	}
	vars, actErr := activation(caller, t, args)
	var act interpreter.Activation
	if actErr == nil {
		// One activation for every rule: Eval of a map would make one
		// per rule.
		act, actErr = interpreter.NewActivation(vars)
	}
	for _, r := range s.rules {
		// A call whose arguments no rule can read fails every rule alike.
		holds, err := false, actErr
		if err == nil {
			holds, err = evalBool(r.prg, act)
		}
		if err != nil {
			if r.Effect != Allow { // deny, or hold for approval: an error must not let the call through
				why := "the policy could not be evaluated: " + err.Error()
				if r.Message != "" {
					why = r.Message + " (" + why + ")"
				}
				return engine.Verdict{Effect: engine.Deny, Rule: r.Name, Reason: why}
			}
			continue // an allow rule that cannot be evaluated does not hold
		}
		if holds {
			msg := r.Message
			if r.Effect == RequireApproval && msg == "" {
				msg = "a person must approve this call"
			}
			return engine.Verdict{Effect: r.effect, Rule: r.Name, Reason: msg}
		}
	}
	return engine.Verdict{}
}

// evalBool runs a rule's program over act.
func evalBool(prg cel.Program, act interpreter.Activation) (bool, error) {
	val, _, err := prg.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := val.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the condition gave %v, not a bool", val)
	}
	return b, nil
}

// activation is what a rule sees of a call.
func activation(caller *engine.Identity, t *tools.Tool, args json.RawMessage) (map[string]any, error) {
	a, err := decodeArgs(args)
	if err != nil {
		return nil, err
	}
	groups := caller.Groups
	if groups == nil {
		groups = []string{}
	}
	claims := caller.Claims
	if claims == nil {
		claims = map[string]any{}
	}
	return map[string]any{
		"caller": map[string]any{"id": caller.ID, "groups": groups, "claims": claims, "method": caller.Method},
		"tool": map[string]any{"name": t.Name, "source": t.Source.Name(), "annotations": map[string]any{
			"read_only": t.Annotations.ReadOnly, "destructive": t.Annotations.Destructive,
			"idempotent": t.Annotations.Idempotent, "open_world": t.Annotations.OpenWorld,
		}},
		"args": a,
	}, nil
}

// decodeArgs decodes a call's arguments, a JSON object (empty: {}), as
// a rule reads them: numbers are doubles, as in JSON, but a double must
// not change the number a tool will read. An integer of magnitude 2^53 or
// more, which a double may round to its neighbour, is a CEL int when it
// is written as a plain integer within int64 (so a rule compares it
// exactly), and any other number a double cannot hold (an integer beyond
// int64 or written with a fraction or an exponent past 2^53, a number
// beyond a double's range, or one that rounds to zero) is an error value:
// a rule that reads it fails, so a deny rule denies, and a rule that does
// not read it is unaffected.
func decodeArgs(args json.RawMessage) (map[string]any, error) {
	if len(args) == 0 {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var a map[string]any
	if err := d.Decode(&a); err != nil {
		return nil, fmt.Errorf("the arguments are not a JSON object: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("the arguments are not a JSON object: text follows it")
	}
	if a == nil { // null
		return map[string]any{}, nil
	}
	for k, v := range a {
		a[k] = ruleValue(v)
	}
	return a, nil
}

// ruleValue is v, decoded with UseNumber, with its numbers as a rule
// reads them (see decodeArgs).
func ruleValue(v any) any {
	switch v := v.(type) {
	case json.Number:
		return ruleNumber(string(v))
	case map[string]any:
		for k, e := range v {
			v[k] = ruleValue(e)
		}
	case []any:
		for i, e := range v {
			v[i] = ruleValue(e)
		}
	}
	return v
}

// ruleNumber is the JSON number text as a rule reads it (see decodeArgs).
func ruleNumber(text string) any {
	f, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil:
		return types.NewErr("the argument %s is a number beyond a double's range, which a rule cannot read", text)
	case f == 0 && strings.ContainsAny(mantissa(text), "123456789"):
		return types.NewErr("the argument %s is a number too small for a double, which a rule cannot read", text)
	case math.Abs(f) < 1<<53:
		return f
	}
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return types.Int(i)
	}
	return types.NewErr("the argument %s is a number a double cannot hold exactly, which a rule cannot read: "+
		"send an integer of magnitude 2^53 or more as a plain integer within int64, or as a string", text)
}

// mantissa is a JSON number's text before its exponent.
func mantissa(text string) string {
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		return text[:i]
	}
	return text
}

// Live is the Set in force, which Swap replaces (a config reload); Rules
// asks it. The zero Live allows every call.
type Live struct {
	set atomic.Pointer[Set]
}

// Swap puts s in force, and reports whether its rules differ from those
// it replaces.
func (l *Live) Swap(s *Set) bool {
	old := l.set.Swap(s)
	return !sameRules(old, s)
}

func sameRules(a, b *Set) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i := range a.Len() {
		if a.rules[i].Rule != b.rules[i].Rule {
			return false
		}
	}
	return true
}

// Decide is Set.Decide with the Set in force.
func (l *Live) Decide(ctx context.Context, caller *engine.Identity, t *tools.Tool, args json.RawMessage) engine.Verdict {
	return l.set.Load().Decide(ctx, caller, t, args)
}

// Check reports what is wrong with c's rules, compiling the policies and
// checking the approval rules' patterns.
func (c Config) Check() error {
	if _, err := Compile(c.Policies); err != nil {
		return err
	}
	return checkApprovals(c.Approvals)
}
