package httpserve

import (
	"flag"
	"strings"
)

// Flags registers the HTTP port's flags on fs, writing into c; the other
// settings are the config file's only.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "http-listen", c.Listen, "`address` of the HTTP port, serving the ToolService over Connect, gRPC-Web and gRPC, /mcp and /healthz (default off)")
	fs.Var(hostList{&c.AllowedHosts}, "http-allowed-hosts", "comma-separated host `names` the HTTP port answers to besides localhost and IP addresses (\"*.example.com\" for its subdomains, \"*\" for any; default none)")
	fs.BoolVar(&c.AllowUnauthenticated, "http-allow-unauthenticated", c.AllowUnauthenticated, "let the HTTP port listen beyond loopback with authentication off (unsafe: anyone who reaches it may call every tool)")
}

// HostsFlag is the flag value of a comma-separated list of host names,
// as --http-allowed-hosts takes them, writing into names; Config.Validate
// (with the list as AllowedHosts) checks each.
func HostsFlag(names *[]string) flag.Value { return hostList{names} }

// hostList is the flag value of a comma-separated list of host names; a
// flag replaces the file's list. Validate checks each name.
type hostList struct{ names *[]string }

func (l hostList) String() string {
	if l.names == nil {
		return ""
	}
	return strings.Join(*l.names, ",")
}

func (l hostList) Set(s string) error {
	*l.names = nil
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			*l.names = append(*l.names, n)
		}
	}
	return nil
}
