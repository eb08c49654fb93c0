// Package redis is a store in Redis (github.com/redis/go-redis/v9), so
// replicas share idempotency records and session variables: one Redis, or
// a Redis Cluster (cluster.go: its URL, redirects and retries; keys.go:
// the rule that keeps each command's keys in one slot).
//
// A record is a hash (fingerprint, owner, state, result) with the record's
// TTL, beside a lease key that Redis expires itself (SET PX): liveness is
// judged by the Redis server's clock alone, so replicas with skewed clocks
// agree. Every transition is one Lua script, so two replicas never both
// hold a claim. Both keys share a hash tag, so they live in one cluster slot.
//
// Waiting for a call in flight on another replica polls with backoff. A
// pub/sub message would wake waiters sooner, but it cannot announce a lease
// that runs out because its owner died, so polling would still be needed;
// keyspace notifications could, but must be enabled in the server's config.
// The notices of store.Signals, which need no such announcement (their
// mailbox is the record, and the engine looks at it now and then), do go
// over pub/sub: see signals.go.
//
// Like every backend it imports only store/ and its driver: never tools/,
// engine/, service/, sources/ or gen/.
package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/internal/tlsfiles"
	"github.com/toolwire/toolwire/store"
)

// Options tune a Store; the zero value means the defaults.
type Options struct {
	// Prefix starts every key the store writes. Default "toolwire:".
	Prefix string
	// PollMin and PollMax bound the backoff of Wait's polling. Defaults
	// 2ms and 100ms.
	PollMin, PollMax time.Duration
	// MaxLogEntries bounds the entries each event log keeps (its stream is
	// trimmed to it): past it, the oldest go, and reading from before them
	// is store.ErrDropped. Default DefaultMaxLogEntries.
	MaxLogEntries int
	// BreakerFailures is how many commands in a row must go unanswered
	// (timed out, refused) before a store made by Open stops sending for
	// BreakerCooldown, failing each operation at once with
	// store.ErrUnavailable. Defaults 3 and 1s; a negative BreakerFailures
	// turns the breaker off. New, over the caller's client, has none.
	BreakerFailures int
	BreakerCooldown time.Duration
	// TLS, for a rediss:// or rediss+cluster:// URL, is the TLS settings
	// of Open's connections: the CAs to trust (RootCAs; the system's when
	// nil) and a client certificate for a server that asks for one. Its
	// ServerName, when empty, is the URL's host (a cluster's first node:
	// every node's certificate must name it, as go-redis checks). Open
	// refuses TLS settings for a URL without TLS.
	TLS *tls.Config
	// CAs, when set, are the CAs a server's certificate must chain to,
	// read again from their file when it changes, in place of
	// TLS.RootCAs: a CA rotated in place is trusted by the next
	// connection, without a restart. The URL's skip_verify still skips
	// the check.
	CAs *tlsfiles.CAs
}

// Timeouts Open gives a client whose URL does not set them (go-redis's
// read_timeout, write_timeout, dial_timeout and max_retries parameters).
// Each operation's own context deadline, which the engine sets to suit
// its caller, bounds it sooner (ContextTimeoutEnabled).
const (
	defaultReadTimeout = 2 * time.Second
	defaultDialTimeout = 2 * time.Second
)

// Store keeps records and variables in Redis.
type Store struct {
	c                goredis.UniversalClient
	prefix           string
	pollMin, pollMax time.Duration
	maxLog           int
	own              bool // Close closes c
	sig              signaller
	warnings         []string                      // Open's: see Warnings
	failover         time.Duration                 // Open's: see FailoverTime
	waits            logWaits                      // WaitLog's blocking reads (logwait.go)
	stats            coalescer[[]int64]            // Stat's reads (coalesce.go)
	ranges           coalescer[[]goredis.XMessage] // After's pages
}

var _ store.Store = (*Store)(nil)

// Open connects to the Redis server at url (redis://[user:pass@]host:port/db
// or rediss:// for TLS), or to the Redis Cluster at
// redis+cluster://[user:pass@]host:port,host:port,… (rediss+cluster:// for
// TLS; see ParseClusterURL), and checks that it answers.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redis store: prefix %q: a brace would take over the keys' hash tags", opts.Prefix)
	}
	failures := cmp.Or(opts.BreakerFailures, 3)
	opts.BreakerCooldown = cmp.Or(opts.BreakerCooldown, time.Second)
	var c goredis.UniversalClient
	var where string
	// The single server's breaker also paces the signals' subscription; a
	// cluster's are per node (cluster.go), and the subscription there goes
	// by its own deadlines and backoff.
	var brk *breaker
	if IsClusterURL(url) {
		cc, err := openCluster(ctx, url, opts, failures)
		if err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
		c, where = cc, "cluster "+strings.Join(cc.Options().Addrs, ",")
	} else {
		o, err := goredis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
		setDefaults(o, url)
		if o.TLSConfig, err = withTLS(o.TLSConfig, opts.TLS, opts.CAs); err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
		sc := goredis.NewClient(o)
		if failures > 0 {
			brk = newBreaker(failures, opts.BreakerCooldown)
			sc.AddHook(brk)
		}
		c, where = sc, o.Addr
	}
	if err := checkKind(ctx, c); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis store %s: %w", where, err)
	}
	s := New(c, opts)
	s.own = true
	if err := s.probeWrites(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis store %s: %w", where, err)
	}
	s.warnings = append(tlsWarnings(c), evictionWarnings(ctx, c)...)
	if cc, ok := c.(*goredis.ClusterClient); ok {
		s.failover = clusterFailoverTime(ctx, cc)
	}
	s.sig.breaker = brk
	return s, nil
}

// checkKind pings the server and checks that it is of the kind the URL
// said: a cluster node reached through redis:// would answer MOVED for
// most keys, and a single Redis named by redis+cluster:// answers no
// CLUSTER SLOTS.
func checkKind(ctx context.Context, c goredis.UniversalClient) error {
	if cc, ok := c.(*goredis.ClusterClient); ok {
		if err := cc.Ping(ctx).Err(); err != nil {
			return err
		}
		info, err := cc.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return errors.New("the cluster's state is not ok (CLUSTER INFO): are all its slots served?")
		}
		return nil
	}
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		// A server that hides INFO (renamed command, ACL) is taken as
		// what the URL says.
		return nil
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return errors.New("this server is a Redis Cluster node: name the cluster as redis+cluster://host:port,host:port,…")
	}
	return nil
}

// setDefaults bounds what a client made from url waits for when the URL
// does not say: without ContextTimeoutEnabled go-redis ignores a context's
// deadline while it reads (a frozen server held a 500 ms rate check for
// 5 s), and its default retries send a command again after a timeout —
// which multiplies the wait under a hang, and may run a script whose
// answer was lost twice. A command is retried by its caller, which knows
// whether it may be.
func setDefaults(o *goredis.Options, url string) {
	o.ContextTimeoutEnabled = true
	q := neturl.Values{}
	if u, err := neturl.Parse(url); err == nil {
		q = u.Query()
	}
	if !q.Has("read_timeout") {
		o.ReadTimeout = defaultReadTimeout
	}
	if !q.Has("write_timeout") {
		o.WriteTimeout = o.ReadTimeout
	}
	if !q.Has("dial_timeout") {
		o.DialTimeout = defaultDialTimeout
	}
	if !q.Has("pool_timeout") {
		o.PoolTimeout = o.ReadTimeout
	}
	if !q.Has("max_retries") {
		o.MaxRetries = -1
	}
}

// withTLS is the TLS settings of a client whose URL gave parsed (nil
// for a URL without TLS) once opts and cas, Options.TLS and Options.CAs,
// are applied.
func withTLS(parsed, opts *tls.Config, cas *tlsfiles.CAs) (*tls.Config, error) {
	switch {
	case opts == nil && cas == nil:
		return parsed, nil
	case parsed == nil:
		return nil, errors.New("TLS settings (a CA, a client certificate) need a rediss:// or rediss+cluster:// URL")
	case opts == nil:
		opts = &tls.Config{}
	}
	t := opts.Clone()
	if t.ServerName == "" {
		t.ServerName = parsed.ServerName
	}
	t.InsecureSkipVerify = t.InsecureSkipVerify || parsed.InsecureSkipVerify // the URL's skip_verify
	if cas != nil && !t.InsecureSkipVerify {
		// crypto/tls's own check would keep the CAs of the start: this
		// one, checking the chain and the name as it does, asks cas at
		// each connection.
		t.RootCAs, t.InsecureSkipVerify = nil, true
		t.VerifyConnection = cas.VerifyServer(t.ServerName)
	}
	t.MinVersion = max(t.MinVersion, tls.VersionTLS12)
	return t, nil
}

// New returns a store over c, which the caller keeps and closes.
func New(c goredis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "toolwire:"
	}
	if opts.PollMin <= 0 {
		opts.PollMin = 2 * time.Millisecond
	}
	if opts.PollMax <= 0 {
		opts.PollMax = 100 * time.Millisecond
	}
	if opts.MaxLogEntries <= 0 {
		opts.MaxLogEntries = DefaultMaxLogEntries
	}
	return &Store{c: c, prefix: opts.Prefix, pollMin: opts.PollMin, pollMax: opts.PollMax, maxLog: opts.MaxLogEntries}
}

// keys returns the record's key and its lease's.
func (s *Store) keys(key string) []string {
	k := s.tagged("idem", key)
	return []string{k, k + ":lease"}
}

// claimScript: KEYS record, lease; ARGV fingerprint, owner, lease ms, ttl ms.
// Returns {"claimed"}, {"completed", result}, {"inflight"} or {"conflict"}.
var claimScript = goredis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'fp', 'state', 'result')
if r[1] then
  local live = r[2] == 'done' or redis.call('EXISTS', KEYS[2]) == 1
  if live then
    if r[1] ~= ARGV[1] then return {'conflict'} end
    if r[2] == 'done' then return {'completed', r[3]} end
    return {'inflight'}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'owner', ARGV[2], 'state', 'running')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return {'claimed'}
`)

// ownedCheck starts the scripts that only the record's owner may run: the
// record must exist, be unfinished and name ARGV[1] as its owner. A lease
// that ran out without a takeover still counts: nobody else ran the call.
const ownedCheck = `
local r = redis.call('HMGET', KEYS[1], 'owner', 'state')
if r[1] ~= ARGV[1] or r[2] ~= 'running' then return 0 end
`

// renewScript: ARGV owner, lease ms.
var renewScript = goredis.NewScript(ownedCheck + `
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
`)

// completeScript: ARGV owner, result, ttl ms.
var completeScript = goredis.NewScript(ownedCheck + `
redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
`)

// releaseScript: ARGV owner.
var releaseScript = goredis.NewScript(ownedCheck + `
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`)

// Claim implements store.Idempotency.
func (s *Store) Claim(ctx context.Context, key, fp, owner string, lease, ttl time.Duration) (store.Claim, error) {
	v, err := claimScript.Run(ctx, s.c, s.keys(key), fp, owner, ms(lease), ms(ttl)).Slice()
	if err != nil {
		return store.Claim{}, fmt.Errorf("redis store: claim: %w", err)
	}
	switch state, _ := v[0].(string); state {
	case "claimed":
		return store.Claim{State: store.Claimed}, nil
	case "completed":
		res, _ := v[1].(string)
		return store.Claim{State: store.Completed, Result: []byte(res)}, nil
	case "inflight":
		return store.Claim{State: store.InFlight}, nil
	case "conflict":
		return store.Claim{State: store.Conflict}, nil
	default:
		return store.Claim{}, fmt.Errorf("redis store: claim: unexpected answer %v", v)
	}
}

// owned runs one of the owner's scripts, mapping "not the owner" to
// ErrLeaseLost.
func (s *Store) owned(ctx context.Context, what string, script *goredis.Script, key string, args ...any) error {
	n, err := script.Run(ctx, s.c, s.keys(key), args...).Int()
	if err != nil {
		return fmt.Errorf("redis store: %s: %w", what, err)
	}
	if n == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

// Renew implements store.Idempotency.
func (s *Store) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	return s.owned(ctx, "renew", renewScript, key, owner, ms(lease))
}

// Complete implements store.Idempotency.
func (s *Store) Complete(ctx context.Context, key, owner string, result []byte, ttl time.Duration) error {
	return s.owned(ctx, "complete", completeScript, key, owner, result, ms(ttl))
}

// Release implements store.Idempotency.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	return s.owned(ctx, "release", releaseScript, key, owner)
}

// doneErr is ctx's error once its deadline has passed, even before its
// own timer has said so: go-redis sets a command's socket deadline to the
// context's, and on a loaded machine the socket's timeout can come first
// (Wait answered "i/o timeout" for a 50 ms deadline while ctx.Err() was
// still nil).
func doneErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// Wait implements store.Idempotency: it polls, backing off, until the lease key
// is gone (the call completed, was released, or its owner died).
func (s *Store) Wait(ctx context.Context, key string) error {
	lease := s.keys(key)[1]
	d := s.pollMin
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		n, err := s.c.Exists(ctx, lease).Result()
		if err != nil && doneErr(ctx) != nil {
			// The deadline came during the command: its error is the
			// socket's timeout, but the caller's deadline is why.
			return doneErr(ctx)
		}
		if err != nil {
			return fmt.Errorf("redis store: wait: %w", err)
		}
		if n == 0 {
			return nil
		}
		t.Reset(d)
		d = min(2*d, s.pollMax)
	}
}

func (s *Store) varKey(scope, name string) string {
	return s.tagged("session", scope) + ":" + name
}

// GetVar implements store.Vars.
func (s *Store) GetVar(ctx context.Context, scope, name string) ([]byte, bool, error) {
	v, err := s.c.Get(ctx, s.varKey(scope, name)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("redis store: get: %w", err)
	}
	return v, true, nil
}

// SetVar implements store.Vars.
func (s *Store) SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error {
	if err := s.c.Set(ctx, s.varKey(scope, name), value, ttl).Err(); err != nil {
		return fmt.Errorf("redis store: set: %w", err)
	}
	return nil
}

// AddVar implements store.Vars.
func (s *Store) AddVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) (bool, error) {
	added, err := s.c.SetNX(ctx, s.varKey(scope, name), value, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("redis store: set if absent: %w", err)
	}
	return added, nil
}

// DeleteVar implements store.Vars.
func (s *Store) DeleteVar(ctx context.Context, scope, name string) error {
	if err := s.c.Del(ctx, s.varKey(scope, name)).Err(); err != nil {
		return fmt.Errorf("redis store: delete: %w", err)
	}
	return nil
}

// Close implements io.Closer: it ends the store's subscription to its
// notices (signals.go) and closes the client Open made.
func (s *Store) Close() error {
	s.sig.close()
	if !s.own {
		return nil
	}
	return s.c.Close()
}

// ms is d in whole milliseconds, at least 1: PX and PEXPIRE reject 0.
func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }
