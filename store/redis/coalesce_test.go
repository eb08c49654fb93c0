package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// TestCoalescerReadsAfterTheAsking: a call made while a read of its key is
// under way gets the next read's answer, never the one under way (begun
// before it asked); the calls made meanwhile share that next read.
func TestCoalescerReadsAfterTheAsking(t *testing.T) {
	var c coalescer[int64]
	var reads atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	read := func(context.Context) (int64, error) {
		n := reads.Add(1)
		entered <- struct{}{}
		if n == 1 {
			<-release // the first read waits, under way, for the test
		}
		return n, nil
	}
	ctx := context.Background()
	first := make(chan int64)
	go func() { v, _ := c.do(ctx, "k", read); first <- v }()
	<-entered
	const later = 5
	var wg sync.WaitGroup
	got := make([]int64, later)
	for i := range later {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = c.do(ctx, "k", read) }()
	}
	// Wait until all have joined the next read before the first ends.
	waitJoined := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running["k"] != nil && c.running["k"].next != nil
	}
	for !waitJoined() {
		// the later calls are on their way
	}
	close(release)
	if v := <-first; v != 1 {
		t.Errorf("the first call got read %d; want 1, its own", v)
	}
	wg.Wait()
	for i, v := range got {
		if v == 1 {
			t.Errorf("call %d made during read 1 got its answer; want a read begun after it asked", i)
		}
	}
	if n := reads.Load(); n > 1+later {
		t.Errorf("%d reads; want at most %d", n, 1+later)
	}
}
