package tools_test

import (
	"sync"
	"testing"

	"github.com/toolwire/toolwire/tools"
)

// TestReportRacesClose reports from one goroutine while the server closes the
// call from another, as MCP progress forwarding does; under -race it fails if
// Report reads the reporter outside the lock Close takes.
func TestReportRacesClose(t *testing.T) {
	for range 200 {
		var mu sync.Mutex
		closed, afterClose := false, 0
		c := tools.NewCall("c1", "t", nil, func(tools.Progress) {
			mu.Lock()
			if closed {
				afterClose++
			}
			mu.Unlock()
		})
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 10 {
				c.Output("x")
			}
		})
		c.Close()
		mu.Lock()
		closed = true
		mu.Unlock()
		wg.Wait()
		if afterClose != 0 {
			t.Fatalf("%d reports reached the server after Close", afterClose)
		}
	}
}
