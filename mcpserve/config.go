package mcpserve

import "flag"

// Config is the MCP surface's configuration; its key sits at the top
// level of serve's config file. The zero value serves /mcp on the HTTP
// port whenever there is one (http_listen).
type Config struct {
	// Off serves no /mcp (flag --no-mcp).
	Off bool `json:"no_mcp"`
}

// Flags registers c's flag on fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Off, "no-mcp", c.Off, "serve no MCP endpoint (/mcp) on the HTTP port")
}
