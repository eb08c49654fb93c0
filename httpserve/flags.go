package httpserve

import "flag"

// Flags registers the HTTP port's flag on fs, writing into c; the other
// settings are the config file's only.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "http-listen", c.Listen, "`address` of the HTTP port, serving the ToolService over Connect, gRPC-Web and gRPC, /mcp and /healthz (default off)")
}
