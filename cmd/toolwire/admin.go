package main

import "flag"

// AdminConfig is the setting of serve's admin HTTP listener (telemetry.go),
// embedded in serveConfig.
type AdminConfig struct {
	AdminListen string `json:"admin_listen"` // admin HTTP address: /metrics, /debug/pprof/; off when empty
}

// Flags registers --admin-listen on fs, writing into c.
func (c *AdminConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.AdminListen, "admin-listen", c.AdminListen, "admin HTTP `address` serving /metrics (Prometheus) and /debug/pprof/ (default off)")
}
