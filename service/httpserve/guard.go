package httpserve

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The port's guard against web pages (docs/security.md, "Browsers"): a page
// in a browser on the machine, or on the network, must not be able to call
// the port's tools. Two checks run before any handler, on every route but
// /healthz:
//
//   - Host: a DNS-rebinding page reaches the port under its own name (its
//     requests are same-origin to the browser), so the port answers only
//     to names it knows: localhost and loopback addresses, IP addresses
//     when the request came over the network (a page cannot rebind an
//     address), and the names in http_allowed_hosts.
//   - Origin: a page of another origin is refused unless its origin is in
//     http_cors_origins. This is net/http's CrossOriginProtection
//     (Sec-Fetch-Site, then Origin against Host), applied to every method
//     rather than only to unsafe ones: the port's GET streams (/mcp) and
//     preflights are refused too. Only a top-level navigation (a link to
//     /console/) may come from another site: it carries no body and no
//     headers a page chose, and nothing it returns reaches that page.

// hostPolicy is http_allowed_hosts, parsed.
type hostPolicy struct {
	any      bool            // "*"
	names    map[string]bool // exact names and addresses, normalized
	suffixes []string        // ".example.com" for "*.example.com"
}

// parseHosts parses http_allowed_hosts (or the setting named so); the
// first entry that is not a host name, an address, "*.name" or "*" is an
// error.
func parseHosts(setting string, entries []string) (hostPolicy, error) {
	p := hostPolicy{names: map[string]bool{}}
	for _, e := range entries {
		switch {
		case e == "*":
			p.any = true
		case strings.HasPrefix(e, "*."):
			name, ok := entryName(e[2:])
			if _, isAddr := addr(name); !ok || isAddr {
				return p, fmt.Errorf("%s: %q is not \"*.\" and a domain name", setting, e)
			}
			p.suffixes = append(p.suffixes, "."+name)
		default:
			name, ok := entryName(e)
			if !ok {
				return p, fmt.Errorf("%s: %q is not a host name or an IP address (write it without a scheme, path or port)", setting, e)
			}
			p.names[name] = true
		}
	}
	return p, nil
}

// entryName is an entry's name as hostName gives it; an entry has no port.
func entryName(e string) (string, bool) {
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")); err == nil {
		return ip.String(), true
	}
	if strings.Contains(e, ":") {
		return "", false
	}
	return hostName(e)
}

func (p hostPolicy) allows(name string) bool {
	if p.any || p.names[name] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// hostName is the host of a Host header (host, host:port, [IPv6]:port) as
// the allow-list compares it: in lower case, without its port, brackets
// or a trailing dot, and an address in its canonical form. It reports
// false for anything else.
func hostName(hostport string) (string, bool) {
	h := hostport
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 || !validPort(h[end+1:]) {
			return "", false
		}
		ip, err := netip.ParseAddr(h[1:end])
		if err != nil || !ip.Is6() {
			return "", false
		}
		return ip.String(), true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if !validPort(h[i:]) {
			return "", false
		}
		h = h[:i]
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if ip, ok := parseIPv4(h); ok {
		return ip.String(), true
	}
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.Contains(h, "..") {
		return "", false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", false
		}
	}
	return h, true
}

// parseIPv4 parses h as an IPv4 address when it has only digits and dots
// (ParseAddr's error for a name costs an allocation on every request).
func parseIPv4(h string) (netip.Addr, bool) {
	if h == "" || strings.Trim(h, "0123456789.") != "" {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(h)
	return ip, err == nil
}

// addr is the address a name from hostName is, if it is one.
func addr(name string) (netip.Addr, bool) {
	if strings.Contains(name, ":") {
		ip, err := netip.ParseAddr(name)
		return ip, err == nil
	}
	return parseIPv4(name)
}

// validPort: "" or ":" and one to five digits.
func validPort(p string) bool {
	if p == "" {
		return true
	}
	if len(p) < 2 || len(p) > 6 || p[0] != ':' {
		return false
	}
	for _, c := range p[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// loopbackName: localhost, or a loopback address (127.0.0.0/8, ::1, and
// 127/8 mapped into IPv6).
func loopbackName(name string) bool {
	if name == "localhost" {
		return true
	}
	ip, ok := addr(name)
	return ok && ip.Unmap().IsLoopback()
}

// cameOverLoopback reports whether r reached the port on a loopback
// address; a request whose address is unknown (a test's recorder) counts
// as one, the stricter case.
func cameOverLoopback(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return true
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return true
	}
	ip, ok := netip.AddrFromSlice(tcp.IP)
	return !ok || ip.Unmap().IsLoopback()
}

// hostRefusal is why r's Host is refused, or "".
func (s *Server) hostRefusal(r *http.Request) string {
	if s.hosts.any {
		return ""
	}
	name, ok := hostName(r.Host)
	if !ok {
		return fmt.Sprintf("the request's Host %s is not a host name; this server answers to localhost and the names in %s", quote(r.Host), s.cfg.HostsSetting)
	}
	if loopbackName(name) || s.hosts.allows(name) {
		return ""
	}
	overLoopback := cameOverLoopback(r)
	if ip, ok := addr(name); ok && !ip.IsUnspecified() && !overLoopback {
		return ""
	}
	answers := "localhost, loopback addresses"
	if !overLoopback {
		answers = "localhost, IP addresses"
	}
	setting := s.cfg.HostsSetting
	return fmt.Sprintf("this server does not answer to the host %s: it answers to %s and the names in %s (--%s), a guard against DNS rebinding; add the name there to serve it", quote(r.Host), answers, setting, strings.ReplaceAll(setting, "_", "-"))
}

// newOriginCheck is the cross-origin check trusting origins (from
// http_cors_origins), or nil when they hold "*": any page may call then.
func newOriginCheck(origins []string) (*http.CrossOriginProtection, error) {
	c := http.NewCrossOriginProtection()
	var errs []error
	for _, o := range origins {
		if o == "*" {
			return nil, nil
		}
		if err := c.AddTrustedOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("http_cors_origins: %w", err))
		}
	}
	return c, errors.Join(errs...)
}

// originRefusal is why r, from a page of another origin, is refused, or "".
func (s *Server) originRefusal(r *http.Request) string {
	if s.origins == nil {
		return ""
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" {
		return "" // a top-level navigation: a link
	}
	check := r
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		// CrossOriginProtection lets the safe methods through, which
		// here would let a page open /mcp's GET stream or preflight.
		c := *r
		c.Method = http.MethodPost
		check = &c
	}
	if s.origins.Check(check) == nil {
		return ""
	}
	if o := r.Header.Get("Origin"); o != "" {
		return fmt.Sprintf("a page of the origin %s may not call this server: only its own pages and the origins in http_cors_origins may", quote(o))
	}
	return fmt.Sprintf("a %s request (Sec-Fetch-Site) may not call this server: only its own pages and the origins in http_cors_origins may", quote(r.Header.Get("Sec-Fetch-Site")))
}

// quote quotes what a client sent, cut to 100 bytes.
func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return fmt.Sprintf("%q", s)
}
