package main

import (
	"flag"

	"github.com/toolwire/toolwire/service/httpserve"
)

// AdminConfig is the setting of serve's admin HTTP listener and of the
// telemetry it serves (telemetry.go), embedded in serveConfig.
type AdminConfig struct {
	AdminListen string `json:"admin_listen"` // admin HTTP address: /metrics, /debug/pprof/; off when empty
	// AdminAllowedHosts are the host names the admin listener answers to
	// besides localhost and IP addresses, as http_allowed_hosts for the
	// HTTP port: a page in a browser must not read the process's profiles
	// and command line through DNS rebinding. Scrapers that find the port
	// by address (Kubernetes service discovery) need none.
	AdminAllowedHosts []string `json:"admin_allowed_hosts"`
	// TraceContent records each call's arguments and result in its span
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result), when an SDK
	// records spans. They may hold personal or secret data, so the default
	// is off.
	TraceContent bool `json:"trace_content"`
}

// Flags registers --admin-listen and --trace-content on fs, writing into c.
func (c *AdminConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.AdminListen, "admin-listen", c.AdminListen, "admin HTTP `address` serving /metrics (Prometheus) and /debug/pprof/ (default off)")
	fs.Var(httpserve.HostsFlag(&c.AdminAllowedHosts), "admin-allowed-hosts", "comma-separated host `names` the admin listener answers to besides localhost and IP addresses (\"*.example.com\" for its subdomains, \"*\" for any; default none)")
	fs.BoolVar(&c.TraceContent, "trace-content", c.TraceContent, "record calls' arguments and results in their spans (they may hold secrets)")
}

// adminPort is the admin listener's HTTP port configuration.
func (c *AdminConfig) adminPort() httpserve.Config {
	return httpserve.Config{AllowedHosts: c.AdminAllowedHosts, HostsSetting: "admin_allowed_hosts", DrainTimeout: adminDrain}
}

// Validate checks admin_allowed_hosts.
func (c *AdminConfig) Validate() error { p := c.adminPort(); return p.Validate() }
