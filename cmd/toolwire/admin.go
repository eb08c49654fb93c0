package main

import "flag"

// AdminConfig is the setting of serve's admin HTTP listener and of the
// telemetry it serves (telemetry.go), embedded in serveConfig.
type AdminConfig struct {
	AdminListen string `json:"admin_listen"` // admin HTTP address: /metrics, /debug/pprof/; off when empty
	// TraceContent records each call's arguments and result in its span
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result), when an SDK
	// records spans. They may hold personal or secret data, so the default
	// is off.
	TraceContent bool `json:"trace_content"`
}

// Flags registers --admin-listen and --trace-content on fs, writing into c.
func (c *AdminConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.AdminListen, "admin-listen", c.AdminListen, "admin HTTP `address` serving /metrics (Prometheus) and /debug/pprof/ (default off)")
	fs.BoolVar(&c.TraceContent, "trace-content", c.TraceContent, "record calls' arguments and results in their spans (they may hold secrets)")
}
