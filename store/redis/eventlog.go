package redis

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/store"
)

// An event log is a Redis stream of its entries (XADD with the entry's
// index as its ID, "i-0", trimmed to MaxLogEntries), a hash of its state
// (owner, last, finished, ttl, opened) and a lease key that Redis expires
// itself, as an idempotency record's: liveness is judged by the server's
// clock. The three share a hash tag, so one script writes a group of
// entries with the state (Open, Append and Finish each take a group: one
// round trip). Readers wait with XREAD BLOCK, so an entry
// appended on one replica reaches a reader on another at once; finishing
// and a lost lease are seen when the block times out (at most a second).

// DefaultMaxLogEntries bounds each event log of a store whose Options leave
// MaxLogEntries unset.
const DefaultMaxLogEntries = 100_000

// logKeys returns the log's stream, state and lease keys.
func (s *Store) logKeys(name string) []string {
	k := s.tagged("log", name)
	return []string{k, k + ":m", k + ":lease"}
}

// appendEntries is the Lua that appends ARGV[from..] as the log's next
// entries, trimmed to ARGV[max] (an index of ARGV), and leaves the last
// index in i: the scripts that write entries write them all in one.
const appendEntries = `
local i = tonumber(redis.call('HGET', KEYS[2], 'last'))
local n = #ARGV - from + 1
if n > 0 then
  for k = from, #ARGV do
    i = i + 1
    redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[max], i .. '-0', 'd', ARGV[k])
  end
  redis.call('HSET', KEYS[2], 'last', i)
  local pt = redis.call('PTTL', KEYS[2])
  if pt > 0 then redis.call('PEXPIRE', KEYS[1], pt) end
end
`

// A full Redis (maxmemory with noeviction) refuses a command that may
// grow its memory, but only as a script's first write: once a script has
// written, Redis lets the rest run rather than stop it halfway. So each
// script's first write says whether a full Redis takes it: opening a log
// and appending to one begin with a write that grows memory (HSET,
// XADD), and are refused whole; renewing a lease begins with PEXPIRE,
// which grows nothing, and is taken, as a full disk under bolt takes a
// renewal and refuses the events. A running batch therefore stays its
// owner's while Redis is full, its events waiting in the owner's memory
// (bounded, see batches.md), and no new log is opened.

// openLogScript: ARGV owner, lease ms, ttl ms, opened (Unix ms), max
// entries, then the first entries. 0: exists.
var openLogScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'last', 0, 'finished', 0, 'ttl', ARGV[3], 'opened', ARGV[4])
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]))
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
local from, max = 6, 5
` + appendEntries + `
return 1
`)

// openFinishedScript: ARGV owner, ttl ms, opened (Unix ms), max entries,
// then the entries. 0: exists. Open and Finish in one: no lease key.
var openFinishedScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'last', 0, 'finished', 1, 'ttl', ARGV[2], 'opened', ARGV[3])
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local from, max = 5, 4
` + appendEntries + `
return 1
`)

// ownedLog starts the scripts only the log's owner may run: -1 when the
// log does not exist, -2 when it is finished or another's. A lease that
// ran out without a takeover still counts: nobody else has written.
const ownedLog = `
local m = redis.call('HMGET', KEYS[2], 'owner', 'finished', 'ttl')
if not m[1] then return -1 end
if m[1] ~= ARGV[1] or m[2] ~= '0' then return -2 end
local ttl = tonumber(m[3])
local function expire(ms)
  redis.call('PEXPIRE', KEYS[2], ms)
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ms) end
end
`

// appendLogScript: ARGV owner, max entries, then the entries. Returns the
// index of the last.
var appendLogScript = goredis.NewScript(ownedLog + `
local from, max = 3, 2
` + appendEntries + `
return i
`)

// renewLogScript: ARGV owner, lease ms. PEXPIRE first: see above.
var renewLogScript = goredis.NewScript(ownedLog + `
if redis.call('PEXPIRE', KEYS[3], ARGV[2]) == 0 then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
end
expire(tonumber(ARGV[2]) + ttl)
return 1
`)

// finishLogScript: ARGV owner, ttl ms, max entries, then the last
// entries.
var finishLogScript = goredis.NewScript(ownedLog + `
local from, max = 4, 3
` + appendEntries + `
redis.call('HSET', KEYS[2], 'finished', 1)
redis.call('DEL', KEYS[3])
expire(tonumber(ARGV[2]))
return 1
`)

// takeOverScript: ARGV owner, lease ms. -1: no log; -2: finished or owned.
var takeOverScript = goredis.NewScript(`
local m = redis.call('HMGET', KEYS[2], 'finished', 'ttl')
if not m[1] then return -1 end
if m[1] ~= '0' or redis.call('EXISTS', KEYS[3]) == 1 then return -2 end
redis.call('HSET', KEYS[2], 'owner', ARGV[1])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
local ms = tonumber(ARGV[2]) + tonumber(m[2])
redis.call('PEXPIRE', KEYS[2], ms)
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ms) end
return 1
`)

// statScript: {last, finished, lease live, opened (Unix ms, 0 when not
// noted)}, or false when there is no log.
var statScript = goredis.NewScript(`
local m = redis.call('HMGET', KEYS[2], 'last', 'finished', 'opened')
if not m[1] then return false end
return {tonumber(m[1]), tonumber(m[2]), redis.call('EXISTS', KEYS[3]), tonumber(m[3] or '0')}
`)

// logResult maps an owner script's answer to the contract's errors.
func logResult(what string, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("redis store: %s: %w", what, err)
	case n == -1:
		return store.ErrLogNotFound
	case n == -2:
		return store.ErrLeaseLost
	}
	return nil
}

// entryArgs are a script's arguments followed by the entries.
func entryArgs(data [][]byte, args ...any) []any {
	out := make([]any, 0, len(args)+len(data))
	out = append(out, args...)
	for _, d := range data {
		out = append(out, d)
	}
	return out
}

// Open implements store.EventLog.
func (s *Store) Open(ctx context.Context, name, owner string, lease, ttl time.Duration, data ...[]byte) error {
	args := entryArgs(data, owner, ms(lease), ms(ttl), time.Now().UnixMilli(), s.maxLog)
	n, err := openLogScript.Run(ctx, s.c, s.logKeys(name), args...).Int64()
	return openResult("open log", n, err)
}

// OpenFinished implements store.LogOpenFinisher: one script, where Open
// and Finish are two round trips.
func (s *Store) OpenFinished(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	args := entryArgs(data, owner, ms(ttl), time.Now().UnixMilli(), s.maxLog)
	n, err := openFinishedScript.Run(ctx, s.c, s.logKeys(name), args...).Int64()
	return openResult("open finished log", n, err)
}

// openResult is what the scripts that open a log return: 0 when it
// exists already.
func openResult(what string, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("redis store: %s: %w", what, err)
	case n == 0:
		return store.ErrLogExists
	}
	return nil
}

// Append implements store.EventLog.
func (s *Store) Append(ctx context.Context, name, owner string, data ...[]byte) (uint64, error) {
	n, err := appendLogScript.Run(ctx, s.c, s.logKeys(name), entryArgs(data, owner, s.maxLog)...).Int64()
	if err := logResult("append", n, err); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// RenewLog implements store.EventLog.
func (s *Store) RenewLog(ctx context.Context, name, owner string, lease time.Duration) error {
	n, err := renewLogScript.Run(ctx, s.c, s.logKeys(name), owner, ms(lease)).Int64()
	return logResult("renew log", n, err)
}

// RenewLogs implements store.LogRenewer: renewLogScript for each log, in
// one pipeline (a cluster client sends each node its slots' share).
func (s *Store) RenewLogs(ctx context.Context, owner string, lease time.Duration, names ...string) ([]error, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make([]*goredis.Cmd, len(names))
	send := func(which []int, sha bool) {
		_, _ = s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, i := range which {
				if sha {
					cmds[i] = renewLogScript.EvalSha(ctx, p, s.logKeys(names[i]), owner, ms(lease))
				} else {
					cmds[i] = renewLogScript.Eval(ctx, p, s.logKeys(names[i]), owner, ms(lease))
				}
			}
			return nil
		})
	}
	all := make([]int, len(names))
	for i := range all {
		all[i] = i
	}
	send(all, true)
	// A server that does not have the script yet (restarted, or a node
	// new to the cluster) is sent it, as Script.Run does.
	var again []int
	for i, c := range cmds {
		if goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		send(again, false)
	}
	errs := make([]error, len(names))
	answered := false
	for i, c := range cmds {
		n, err := c.Int64()
		answered = answered || err == nil
		errs[i] = logResult("renew log", n, err)
	}
	if !answered {
		return nil, errs[0]
	}
	return errs, nil
}

// TakeOver implements store.EventLog.
func (s *Store) TakeOver(ctx context.Context, name, owner string, lease time.Duration) error {
	n, err := takeOverScript.Run(ctx, s.c, s.logKeys(name), owner, ms(lease)).Int64()
	return logResult("take over log", n, err)
}

// Finish implements store.EventLog.
func (s *Store) Finish(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	n, err := finishLogScript.Run(ctx, s.c, s.logKeys(name), entryArgs(data, owner, ms(ttl), s.maxLog)...).Int64()
	return logResult("finish log", n, err)
}

// Stat implements store.EventLog.
func (s *Store) Stat(ctx context.Context, name string) (store.LogInfo, error) {
	v, err := s.stats.do(ctx, name, func(ctx context.Context) ([]int64, error) {
		return statScript.Run(ctx, s.c, s.logKeys(name)).Int64Slice()
	})
	if errors.Is(err, goredis.Nil) {
		return store.LogInfo{}, store.ErrLogNotFound
	}
	if err != nil {
		return store.LogInfo{}, fmt.Errorf("redis store: stat log: %w", err)
	}
	finished := v[1] == 1
	info := store.LogInfo{Last: uint64(v[0]), Finished: finished, Owned: !finished && v[2] == 1}
	if len(v) > 3 && v[3] > 0 {
		info.Opened = time.UnixMilli(v[3])
	}
	return info, nil
}

// afterPage is how many entries After reads per XRANGE.
const afterPage = 256

// After implements store.EventLog: it reads the entries up to the last one
// appended when it is called, a page at a time.
func (s *Store) After(ctx context.Context, name string, index uint64) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		info, err := s.Stat(ctx, name)
		if err != nil {
			yield(store.Entry{}, err)
			return
		}
		key := s.logKeys(name)[0]
		for next := index + 1; next <= info.Last; {
			from, to := strconv.FormatUint(next, 10)+"-0", strconv.FormatUint(info.Last, 10)+"-0"
			msgs, err := s.ranges.do(ctx, key+" "+from+" "+to, func(ctx context.Context) ([]goredis.XMessage, error) {
				return s.c.XRangeN(ctx, key, from, to, afterPage).Result()
			})
			if err != nil {
				yield(store.Entry{}, fmt.Errorf("redis store: read log: %w", err))
				return
			}
			if len(msgs) == 0 {
				// Trimmed (or, racing its expiry, gone): the entries after
				// index are not all there.
				yield(store.Entry{}, store.ErrDropped)
				return
			}
			for _, m := range msgs {
				i, err := entryIndex(m.ID)
				if err != nil {
					yield(store.Entry{}, err)
					return
				}
				if i != next {
					yield(store.Entry{}, store.ErrDropped)
					return
				}
				d, _ := m.Values["d"].(string)
				if !yield(store.Entry{Index: i, Data: []byte(d)}, nil) {
					return
				}
				next++
			}
		}
	}
}

// entryIndex is the index an entry's stream ID ("i-0") carries.
func entryIndex(id string) (uint64, error) {
	ms, _, _ := strings.Cut(id, "-")
	i, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis store: a log entry with ID %q", id)
	}
	return i, nil
}

// maxBlock bounds one XREAD BLOCK of WaitLog, so that a finished log, a
// lost owner or a done context is seen within it.
const maxBlock = time.Second

// blockMargin is how long before its context's deadline a block of
// WaitLog ends.
const blockMargin = 50 * time.Millisecond

// WaitLog implements store.EventLog.
func (s *Store) WaitLog(ctx context.Context, name string, index uint64) error {
	info, err := s.Stat(ctx, name)
	if err != nil || info.Last > index || info.Finished || !info.Owned {
		if errors.Is(err, store.ErrLogNotFound) {
			return nil // After says so
		}
		return err
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < blockMargin+time.Millisecond {
		return ctx.Err()
	}
	// The block itself is shared (logwait.go), and has no deadline but
	// maxBlock: a waiter whose deadline comes first leaves it then.
	return s.waitShared(ctx, name, index)
}
