// Package holds counts long-lived places (streams, subscriptions) by
// holder, bounded per holder and in all: what a WatchTools stream or an
// MCP subscriptions/listen stream takes for as long as its client keeps
// it, and what no other bound counts.
package holds

import "sync"

// Counter counts places held by holder, at most PerHolder each and Max in
// all. Its zero value holds nothing and refuses every place; set both
// bounds before first use.
type Counter struct {
	Max, PerHolder int

	mu      sync.Mutex
	holders map[string]int
	total   int
}

// Full says why Take refused a place: Held places are held already,
// by the holder (Total false: PerHolder) or in all (Total true: Max).
type Full struct {
	Held  int
	Total bool
}

// Take takes a place for holder and returns the function that gives it
// back (more calls do nothing), or, when holder or all hold as many as
// they may, nil and why. A place held is never taken back for another.
func (c *Counter) Take(holder string) (release func(), full *Full) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.holders[holder]; n >= c.PerHolder {
		return nil, &Full{Held: n}
	}
	if c.total >= c.Max {
		return nil, &Full{Held: c.total, Total: true}
	}
	if c.holders == nil {
		c.holders = map[string]int{}
	}
	c.holders[holder]++
	c.total++
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.holders[holder]--; c.holders[holder] == 0 {
			delete(c.holders, holder)
		}
		c.total--
	}), nil
}

// Held counts the places held, by every holder.
func (c *Counter) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
