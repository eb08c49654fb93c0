package otelobserver

import (
	"fmt"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestAttrSetsBounded: tools that come and go (an MCP server's changing
// list, config reloads) each leave their cached attribute sets; the cache
// keeps at most maxAttrSets however many names were ever called. It kept
// every one: 20,000 names, 20,000 sets.
func TestAttrSetsBounded(t *testing.T) {
	t.Parallel()
	o := New(nil, sdkmetric.NewMeterProvider(), false).(*otelTelemetry)
	for i := range 5 * maxAttrSets {
		o.measure(fmt.Sprint("tool_", i), toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED)
	}
	if n := len(o.attrs); n > maxAttrSets {
		t.Errorf("%d attribute sets cached after %d tool names, want at most %d", n, 5*maxAttrSets, maxAttrSets)
	}
	// The cache still serves: the same tool gets the same options.
	if a, b := o.measure("echo", 0), o.measure("echo", 0); a != b {
		t.Error("a tool measured twice in a row got its options made twice")
	}
}
