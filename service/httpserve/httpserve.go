// Package httpserve owns toolwire's HTTP port: the listener, TLS, HTTP/2
// without TLS (h2c, so gRPC and Connect's streaming work on a plaintext
// port), the guard against web pages (Host and Origin), CORS, request
// limits, /healthz and the drain. Surfaces do not
// listen themselves: each hands its handler to the one Server, which
// serves them all on one loop that stops on its context — the shape of
// exposure-notifications-server's pkg/server (ServeHTTPHandler).
//
// The surfaces it serves (Connect, gRPC-Web and JSON for the ToolService;
// /mcp; later /console/) are packages of their own over the one engine;
// this package knows none of them and imports neither the engine nor gRPC.
package httpserve

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/cors"
	"github.com/toolwire/toolwire/internal/connlimit"
	"github.com/toolwire/toolwire/internal/logcut"
)

// Config is the HTTP port's configuration; its keys sit at the top level
// of the config file. The zero value serves no HTTP port.
type Config struct {
	// Listen is the address of the HTTP port (flag --http-listen); ""
	// serves none.
	Listen string `json:"http_listen"`
	// AllowedHosts are the host names the port answers to (flag
	// --http-allowed-hosts) besides localhost and loopback addresses, and
	// besides IP addresses for requests that come over the network: exact
	// names or addresses, "*.example.com" for any subdomain, "*" for any
	// host. A request naming another host in its Host header gets 403, a
	// guard against DNS rebinding. None by default.
	AllowedHosts []string `json:"http_allowed_hosts"`
	// HostsSetting names AllowedHosts's setting in errors and refusals:
	// "http_allowed_hosts" unless set (the admin listener's is
	// "admin_allowed_hosts"); its flag is the name with dashes.
	HostsSetting string `json:"-"`
	// AllowUnauthenticated lets the port listen beyond loopback with
	// authentication off (flag --http-allow-unauthenticated); without it,
	// serve refuses to start so (CheckExposure).
	AllowUnauthenticated bool `json:"http_allow_unauthenticated"`
	// CORSOrigins are the browser origins allowed to call the port
	// cross-origin (exact origins, or "*"); none by default, so browsers
	// may call it only from a page it serves itself: a page of any other
	// origin gets 403.
	CORSOrigins []string `json:"http_cors_origins"`
	// MaxBodyBytes caps a request's body (default 4 MiB, the gRPC
	// surface's largest message); a larger one gets 413.
	MaxBodyBytes int64 `json:"http_max_body_bytes"`
	// ReadTimeout bounds reading a whole request, headers and body, so a
	// client that sends slowly holds a connection no longer (default 30s).
	ReadTimeout time.Duration `json:"http_read_timeout"`
	// DrainTimeout is how long Serve waits, once its context is done, for
	// the requests in flight (streams among them) before closing their
	// connections (default 30s); the port answers meanwhile, refusing new
	// requests with 503.
	DrainTimeout time.Duration `json:"http_drain_timeout"`
	// MaxConnections bounds the client connections open at once on the
	// port; one accepted past it is closed at once (and logged). Default
	// 4096 (the admin listener's too); -1: no bound.
	MaxConnections int `json:"http_max_connections"`
}

// DefaultMaxConnections is Config.MaxConnections's default.
const DefaultMaxConnections = 4096

// withDefaults fills in the zero values.
func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 4 << 20
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.HostsSetting == "" {
		c.HostsSetting = "http_allowed_hosts"
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	return c
}

// DrainBound is the longest Serve takes, once its context is done, to
// drain the requests in flight: DrainTimeout.
func (c Config) DrainBound() time.Duration { return c.withDefaults().DrainTimeout }

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	for _, o := range c.CORSOrigins {
		if o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			return fmt.Errorf("http_cors_origins: %q is not an origin (want \"*\" or scheme://host[:port])", o)
		}
	}
	if _, err := newOriginCheck(c.CORSOrigins); err != nil {
		return err
	}
	if _, err := parseHosts(c.withDefaults().HostsSetting, c.AllowedHosts); err != nil {
		return err
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("http_max_body_bytes %d: want a positive size", c.MaxBodyBytes)
	}
	return nil
}

// Server is the HTTP port. Register the surfaces' handlers with Handle, then
// Serve.
type Server struct {
	cfg     Config
	tls     *tls.Config
	log     *slog.Logger
	mux     *http.ServeMux
	refuse  map[string]Refuse // by pattern: how the port's own refusals are written there
	hosts   hostPolicy
	origins *http.CrossOriginProtection // nil: any origin may call
	work    work
	// pages limits the lines logged for web pages' refused requests: a
	// page can send them as fast as a browser will.
	pages logcut.Limit
}

// Refuse writes one of the port's own refusals in a surface's protocol:
// the status (403 for a foreign Host or Origin, 413 for a body past its
// limit, 503 while draining), a code such as "permission_denied",
// "resource_exhausted" or "unavailable", and a message people can read.
// The default writes a Connect error in the request's protocol (Connect,
// gRPC-Web or gRPC).
type Refuse func(w http.ResponseWriter, r *http.Request, status int, code, message string)

// New makes the HTTP port with cfg, which Validate has passed (entries it
// would refuse are left out). tlsConfig, when not nil, serves HTTPS
// (HTTP/1.1 and HTTP/2); without it the port speaks HTTP/1.1 and h2c.
func New(cfg Config, tlsConfig *tls.Config, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg.withDefaults(), tls: tlsConfig, log: log, mux: http.NewServeMux(), refuse: map[string]Refuse{}}
	s.hosts, _ = parseHosts(s.cfg.HostsSetting, cfg.AllowedHosts)
	s.origins, _ = newOriginCheck(cfg.CORSOrigins)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	return s
}

// CheckExposure refuses a port listening at addr beyond loopback while
// authentication is off, unless AllowUnauthenticated: anyone who could
// reach it could call every tool (as a Jupyter server without a token, or
// the MCP Inspector's proxy before CVE-2025-49596).
func (c Config) CheckExposure(addr net.Addr, authenticated bool) error {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() || authenticated || c.AllowUnauthenticated {
		return nil
	}
	return fmt.Errorf("http_listen %s: the HTTP port would listen beyond this machine (on %s) with authentication off, so anyone who reaches it could call every tool. "+
		"Configure callers (--tokens-file, --oidc-issuer or --client-ca; docs/auth.md), listen on a loopback address (127.0.0.1:%d), "+
		"or accept it with --http-allow-unauthenticated (http_allow_unauthenticated: true)", c.Listen, tcp.IP, tcp.Port)
}

// Handle serves h for the requests pattern (http.ServeMux's patterns)
// matches; the port's own refusals there are written by refuse (nil: a
// Connect error in the request's protocol). Call it before Serve.
func (s *Server) Handle(pattern string, h http.Handler, refuse Refuse) {
	s.mux.Handle(pattern, h)
	if refuse != nil {
		s.refuse[pattern] = refuse
	}
}

// healthz answers plain HTTP probes: 200 while serving, 503 once draining.
// It answers whatever the Host and Origin: it says nothing but that, and
// probes name the port as they find it (kubelet by the pod's address, a
// load balancer by a name of its own).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.work.isDraining() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "draining\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// Handler is the port's handler: the routes, behind the guard against
// web pages (Host, then Origin), the drain, CORS and the body limit.
// Serve uses it; tests may too.
func (s *Server) Handler() http.Handler {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.cfg.MaxBodyBytes {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
			s.refuseFor(r)(w, r, http.StatusRequestEntityTooLarge, "resource_exhausted", fmt.Sprintf("the request's body is %d bytes; this server takes at most %d (http_max_body_bytes)", r.ContentLength, s.cfg.MaxBodyBytes))
			return
		}
		if r.ContentLength >= 0 {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
			s.mux.ServeHTTP(w, r)
			return
		}
		body := &overLimitBody{ReadCloser: http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)}
		r.Body = body
		s.mux.ServeHTTP(&refusingWriter{ResponseWriter: w, body: body, refuse: func(w http.ResponseWriter) {
			s.refuseFor(r)(w, r, http.StatusRequestEntityTooLarge, "resource_exhausted", fmt.Sprintf("the request's body is more than %d bytes, the most this server takes (http_max_body_bytes)", s.cfg.MaxBodyBytes))
		}}, r)
	})
	if len(s.cfg.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: s.cfg.CORSOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodOptions},
			// What Connect, gRPC-Web and MCP's streamable HTTP send and read.
			AllowedHeaders: []string{"Authorization", "Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms", "Connect-Content-Encoding", "Connect-Accept-Encoding",
				"Grpc-Timeout", "Grpc-Accept-Encoding", "X-Grpc-Web", "X-User-Agent", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-ID"},
			ExposedHeaders: []string{"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin", "Connect-Content-Encoding", "Mcp-Session-Id", "WWW-Authenticate"},
			MaxAge:         7200,
		}).Handler(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			s.mux.ServeHTTP(w, r)
			return
		}
		why := s.hostRefusal(r)
		if why == "" {
			why = s.originRefusal(r)
		}
		if why != "" {
			if ok, held := s.pages.Allow(); ok { // at most 10 lines every 10 s
				s.log.Debug("HTTP port: refused a request from a web page", "reason", why, "method", logcut.String(r.Method), "path", logcut.String(r.URL.Path),
					"host", logcut.String(r.Host), "origin", logcut.String(r.Header.Get("Origin")), "sec_fetch_site", logcut.String(r.Header.Get("Sec-Fetch-Site")), "remote", r.RemoteAddr,
					"not_logged_before", held)
			}
			s.refuseFor(r)(w, r, http.StatusForbidden, "permission_denied", why)
			return
		}
		if !s.work.enter() {
			s.refuseFor(r)(w, r, http.StatusServiceUnavailable, "unavailable", "the server is draining (shutting down); retry on another replica")
			return
		}
		defer s.work.leave()
		h.ServeHTTP(w, r)
	})
}

// Serve serves on lis until ctx is done, then drains: the port goes on
// answering, /healthz with 503 and new requests with 503 (unavailable, in
// their route's protocol), while the requests in flight get DrainTimeout
// to finish; then the listener and the connections close. It returns nil
// after a drain.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(s.tls == nil)
	hs := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         s.tls,
		Protocols:         protocols,
		ReadHeaderTimeout: min(s.cfg.ReadTimeout, 10*time.Second),
		ReadTimeout:       s.cfg.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10, // as the gRPC port's (grpcserve.MaxHeaderBytes)
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		// Every request's context ends with the port's.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	lis = connlimit.Listen(lis, s.cfg.MaxConnections, "http_max_connections", s.log)
	go func() {
		if s.tls != nil {
			errc <- hs.ServeTLS(lis, "", "") // with ALPN for HTTP/2; the certificates are in TLSConfig
			return
		}
		errc <- hs.Serve(lis)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	drain, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	select {
	case <-s.work.drain():
	case <-drain.Done():
	}
	// What is left are refusals and probes, which end at once, and the
	// requests still running after DrainTimeout, which Close ends.
	if err := hs.Shutdown(drain); err != nil {
		s.log.Warn("HTTP port: requests still running after the drain; closing their connections", "error", err)
		_ = hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ListenAndServe listens on the configured address and serves; see Serve.
// With no address configured it does nothing until ctx is done.
func (s *Server) ListenAndServe(ctx context.Context) error {
	if s.cfg.Listen == "" {
		<-ctx.Done()
		return nil
	}
	lis, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("http_listen: %w", err)
	}
	s.log.Info("toolwire HTTP port listening on "+lis.Addr().String(), "addr", lis.Addr().String(), "tls", s.tls != nil)
	return s.Serve(ctx, lis)
}

// WriteError answers with a Connect-protocol error body, which Connect
// clients read and people can: {"code":"...","message":"..."}.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
