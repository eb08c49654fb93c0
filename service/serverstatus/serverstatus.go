// Package serverstatus is the read-only view of a running server that
// toolwire.v1.AdminService serves (GetServerStatus): the registry's
// revision, the sources of tools with their state, the batches in flight
// and the engine's counters. It has no transport in it, as the engine has
// none: the gRPC surface (service) and the Connect surface (connectserve)
// each answer the RPC with View.Status, after their authentication put the
// caller's identity in the context.
//
// Who sees what: every caller sees the revision, the sources' kinds,
// names, states and tool counts, and its own batches; an administrator (a
// caller in Config.Group, or everyone when authentication is off, since
// everyone is then the same anonymous caller) also sees every caller's
// batches, the sources' last errors (which may name hosts and paths) and
// the engine's counters.
//
// Import rules: serverstatus may import engine, tools and gen/toolwire/v1; it
// must not import a surface, sources/, store/, grpc-go or cmd/
// (docs/architecture.md). cmd/toolwire hands it the sources' status as
// plain values (Config.Sources).
package serverstatus

import (
	"context"
	"slices"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultGroup is the group whose callers are administrators unless
// Config.Group names another.
const DefaultGroup = "admin"

// Source is one declared source of tools, as the sources report it.
type Source struct {
	Kind  string    // its kind's key in the config file: "http_tools", "mcp_servers", …
	Name  string    // its name in that list
	Owner string    // the owner of its tools in the registry (tools.Registry.Owner)
	State string    // "up", "down", "retrying" or "static"
	Err   string    // why its last connection failed or ended
	Since time.Time // when State last changed
	// Skipped counts what it declares and could not offer (an OpenAPI
	// document's operations that did not become tools).
	Skipped int
}

// Config configures a View; the zero value reports no declared sources and
// takes callers in DefaultGroup as administrators.
type Config struct {
	// Sources reports the declared sources now; nil reports none (the
	// built-in tools are reported all the same).
	Sources func() []Source
	// Open says authentication is off: every caller is the anonymous
	// caller, who is then an administrator.
	Open bool
	// Group is the group (auth.groups) whose callers are administrators;
	// "" means DefaultGroup.
	Group string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxBatches is the most batches a view lists, the oldest (the rest
	// are counted in batch_count); 0 means DefaultMaxBatches. It bounds
	// what one GetServerStatus costs and sends, however many batches run.
	MaxBatches int
}

// DefaultMaxBatches is how many batches a view lists unless
// Config.MaxBatches says otherwise: as many as the contract promises
// (GetServerStatusResponse.batches).
const DefaultMaxBatches = 1000

// View is the server view of one engine and registry.
type View struct {
	eng *engine.Engine
	reg *tools.Registry
	cfg Config
}

// New returns the view of eng and reg.
func New(eng *engine.Engine, reg *tools.Registry, cfg Config) *View {
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBatches <= 0 {
		cfg.MaxBatches = DefaultMaxBatches
	}
	return &View{eng: eng, reg: reg, cfg: cfg}
}

// Admin reports whether ctx's caller sees every caller's batches.
func (v *View) Admin(ctx context.Context) bool {
	id := engine.IdentityFrom(ctx)
	return (v.cfg.Open && id.ID == "") || slices.Contains(id.Groups, v.cfg.Group)
}

// Status is GetServerStatus's answer for ctx's caller. It is a pass over
// the registry's tools (each source's, those the caller may call), so it
// waits its turn as a listing does (Engine.Scan): its error is the
// engine's, ResourceExhausted when the turn did not come.
func (v *View) Status(ctx context.Context) (*toolwirev1.GetServerStatusResponse, error) {
	now := v.cfg.Now()
	all := v.Admin(ctx)
	snap := v.reg.Snapshot()
	release, err := v.eng.Scan(ctx, snap)
	if err != nil {
		return nil, err
	}
	defer release()
	// Tools by their owner, to count each source's, and the names of
	// those the caller may call.
	counts := map[string]int32{}
	names := map[string][]string{}
	for _, t := range snap.Tools() {
		if owner, ok := v.reg.Owner(t.Name); ok {
			counts[owner]++
			if v.eng.Permits(ctx, t.Name) {
				names[owner] = append(names[owner], t.Name)
			}
		}
	}
	resp := &toolwirev1.GetServerStatusResponse{
		Revision:   snap.Revision(),
		ToolCount:  int32(snap.Len()),
		AllCallers: all,
		ServerTime: timestamppb.New(now),
		CallerId:   engine.CallerFrom(ctx),
	}
	if n := counts[tools.Builtin]; n > 0 {
		resp.Sources = append(resp.Sources, &toolwirev1.SourceStatus{Kind: "builtin", Name: "builtin", State: toolwirev1.SourceState_SOURCE_STATE_STATIC, ToolCount: n, Tools: names[tools.Builtin]})
	}
	if v.cfg.Sources != nil {
		http := map[string]bool{} // HTTP tools share one owner: count each tool once, by its name
		for _, s := range v.cfg.Sources() {
			st := &toolwirev1.SourceStatus{Kind: s.Kind, Name: s.Name, State: state(s.State), ToolCount: counts[s.Owner], Tools: names[s.Owner], Skipped: int32(s.Skipped)}
			if s.Kind == "http_tools" {
				st.ToolCount, st.Tools = 0, nil
				if owner, ok := v.reg.Owner(s.Name); ok && owner == s.Owner && !http[s.Name] {
					st.ToolCount, http[s.Name] = 1, true
					if v.eng.Permits(ctx, s.Name) {
						st.Tools = []string{s.Name}
					}
				}
			}
			if !s.Since.IsZero() {
				st.Since = timestamppb.New(s.Since)
			}
			if all {
				st.LastError = s.Err
			}
			resp.Sources = append(resp.Sources, st)
		}
	}
	batches, total := v.eng.Batches(ctx, all, v.cfg.MaxBatches)
	resp.BatchCount = int32(total)
	for _, b := range batches {
		bf := &toolwirev1.BatchInFlight{
			BatchId: b.ID, CallerId: b.Caller, SessionId: b.SessionID,
			Calls: int32(b.Calls), CallsRunning: int32(b.Running),
			Started: timestamppb.New(b.Started), Age: durationpb.New(max(b.Age(now), 0)), Detached: b.Detached,
		}
		for _, c := range b.Active {
			bf.Running = append(bf.Running, &toolwirev1.CallInFlight{CallId: c.ID, ToolName: c.Tool, Index: uint32(c.Index),
				Started: timestamppb.New(c.Started), Age: durationpb.New(max(now.Sub(c.Started), 0))})
		}
		resp.Batches = append(resp.Batches, bf)
	}
	if all {
		st := v.eng.Stats()
		resp.Engine = &toolwirev1.EngineStats{
			Batches: int32(st.Batches), CallsRunning: int32(st.CallsRunning), SlotWaiters: st.SlotWaiters,
			Callers: int32(st.Callers), Abandoned: st.Abandoned, BufferedBytes: st.BufferedBytes,
			WaitingToReport: int32(st.WaitingToReport), SessionWaiting: int32(st.SessionWaiting),
		}
	}
	return resp, nil
}

// state is the contract's value of a source's state.
func state(s string) toolwirev1.SourceState {
	switch s {
	case "up":
		return toolwirev1.SourceState_SOURCE_STATE_UP
	case "down":
		return toolwirev1.SourceState_SOURCE_STATE_DOWN
	case "retrying":
		return toolwirev1.SourceState_SOURCE_STATE_RETRYING
	case "static":
		return toolwirev1.SourceState_SOURCE_STATE_STATIC
	}
	return toolwirev1.SourceState_SOURCE_STATE_UNSPECIFIED
}
