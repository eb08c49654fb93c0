package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/storetest"
)

// keysRecorder is a go-redis hook that records the keys of every command
// the store sends, grouped by command.
type keysRecorder struct {
	mu      sync.Mutex
	cmds    [][]string // each command's keys
	scripts map[string]bool
}

func (r *keysRecorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *keysRecorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.record(cmd.Args())
		return next(ctx, cmd)
	}
}

func (r *keysRecorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			r.record(c.Args())
		}
		return next(ctx, cmds)
	}
}

// record takes a command's keys from its arguments, for the commands the
// store sends; any other fails the test through keys == nil.
func (r *keysRecorder) record(args []any) {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	name := strings.ToLower(s[0])
	var keys []string
	switch name {
	case "evalsha", "eval":
		n, _ := strconv.Atoi(s[2])
		keys = s[3 : 3+n]
		r.mu.Lock()
		if name == "evalsha" {
			r.scripts[s[1]] = true
		}
		r.mu.Unlock()
	case "xread":
		for i, a := range s {
			if strings.EqualFold(a, "streams") {
				rest := s[i+1:]
				keys = rest[:len(rest)/2]
			}
		}
	case "del", "exists", "mget":
		keys = s[1:]
	case "get", "set", "xrange", "pttl", "pexpire":
		keys = s[1:2]
	case "hello", "ping", "client", "info", "script":
		return
	default:
		keys = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, append([]string{name}, keys...))
}

// TestKeysShareASlot runs the whole store contract and checks every
// command the store sent: all the keys of one command or script hash to
// one cluster slot, and every script of the package was run. A script
// whose keys span slots is refused by a cluster (CROSSSLOT).
func TestKeysShareASlot(t *testing.T) {
	mr := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { c.Close() })
	rec := &keysRecorder{scripts: map[string]bool{}}
	c.AddHook(rec)
	n := 0
	open := func(t *testing.T) *Store {
		n++
		return New(c, Options{Prefix: fmt.Sprintf("t%d:", n), MaxLogEntries: 5})
	}
	advance := storetest.WithAdvance(mr.FastForward)
	storetest.Idempotency(t, open, advance)
	storetest.Vars(t, open, advance)
	storetest.EventLog(t, open, advance, storetest.WithMaxLogEntries(5))
	s := open(t)
	ctx := context.Background()
	// Names that would leave a hash tag empty, and the rate limit.
	for _, name := range []string{"", "}", "}x", "%"} {
		if _, err := s.Claim(ctx, name, "fp", "o", time.Minute, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Open(ctx, name, "o", time.Minute, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TakeRate(ctx, "alice", 1, 10, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitLog(ctx, "", 0); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.cmds) < 50 {
		t.Fatalf("only %d commands recorded", len(rec.cmds))
	}
	for _, cmd := range rec.cmds {
		name, keys := cmd[0], cmd[1:]
		if len(keys) == 0 {
			t.Errorf("%s: a command whose keys the test does not know; teach keysRecorder.record", name)
			continue
		}
		for _, k := range keys[1:] {
			if testenv.KeySlot(k) != testenv.KeySlot(keys[0]) {
				t.Errorf("%s over %q: %q is in slot %d, %q in %d", name, keys, keys[0], testenv.KeySlot(keys[0]), k, testenv.KeySlot(k))
			}
		}
	}
	for name, script := range map[string]*goredis.Script{
		"claim": claimScript, "renew": renewScript, "complete": completeScript, "release": releaseScript,
		"openLog": openLogScript, "appendLog": appendLogScript, "renewLog": renewLogScript,
		"finishLog": finishLogScript, "openFinished": openFinishedScript, "takeOver": takeOverScript, "stat": statScript, "rate": rateScript,
	} {
		if !rec.scripts[script.Hash()] {
			t.Errorf("the %s script was never run: its keys went unchecked", name)
		}
	}
}

// TestTagNeverEmpty: whatever the name, a group's keys have a non-empty
// hash tag, so they share a slot; distinct names give distinct keys.
func TestTagNeverEmpty(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{})
	seen := map[string]string{}
	for _, name := range []string{"", "}", "}}", "}x", "%", "%}", "%%", "x", "{", "{}", "a}b", "{a}", `"alice"/"t"/k`} {
		for _, keys := range [][]string{s.keys(name), s.logKeys(name)} {
			for _, k := range keys[1:] {
				if testenv.KeySlot(k) != testenv.KeySlot(keys[0]) {
					t.Errorf("name %q: %q and %q are in slots %d and %d", name, keys[0], k, testenv.KeySlot(keys[0]), testenv.KeySlot(k))
				}
			}
		}
		k := s.keys(name)[0]
		if other, ok := seen[k]; ok {
			t.Errorf("names %q and %q share the key %q", name, other, k)
		}
		seen[k] = name
	}
}
