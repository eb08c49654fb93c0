package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// rateScript is GCRA (the generic cell rate algorithm): the key holds the
// theoretical arrival time (TAT) of the next call in ms of the server's
// clock, so every replica judges by one clock. n calls fit when the TAT
// after them, less the burst's worth of intervals, is not in the future.
// KEYS key; ARGV interval ms (1000/rate), burst, n. Returns the wait in ms
// as a string, "0" when the calls were taken.
var rateScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next = tat + n * interval
local wait = next - burst * interval - now
if wait > 0 then return tostring(wait) end
redis.call('SET', KEYS[1], tostring(next), 'PX', math.ceil(next - now) + 1000)
return '0'
`)

// TakeRate takes n calls from key's allowance of perSecond calls a second,
// burst at once, shared by every replica on this Redis (an
// engine.RateStore): 0 when it took them, else how long until it could,
// having taken nothing. One round trip, one key per caller, which expires
// once the caller's allowance is full again.
func (s *Store) TakeRate(ctx context.Context, key string, n int, perSecond float64, burst int) (time.Duration, error) {
	if perSecond <= 0 {
		return 0, fmt.Errorf("redis store: rate %g", perSecond)
	}
	interval := 1000 / perSecond
	res, err := rateScript.Run(ctx, s.c, []string{s.tagged("rate", key)},
		strconv.FormatFloat(interval, 'f', -1, 64), burst, n).Text()
	if err != nil {
		return 0, fmt.Errorf("redis store: rate: %w", err)
	}
	ms, err := strconv.ParseFloat(res, 64)
	if err != nil {
		return 0, fmt.Errorf("redis store: rate: %q: %w", res, err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}
