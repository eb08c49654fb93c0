package auth

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/logcut"
)

// RequireCredentials returns the HTTP adapter of v: middleware that
// authenticates every request with v, as every surface does. A request
// whose credentials v accepts reaches the handler with its caller in the
// context (engine.WithIdentity). Any other is answered 401 Unauthorized with
// "WWW-Authenticate: Bearer" and a Connect error body,
// {"code":"unauthenticated","message":"<v's reason>"}, which Connect,
// gRPC-Web and JSON clients all read; the handler never sees it. With
// authentication off (v not Enabled) every request reaches the handler as
// the anonymous caller "".
//
// The credentials are the Authorization headers and, over TLS, the client
// certificate (http.Request.TLS.PeerCertificates, which v checks against
// its client CAs once per chain, not once per request of the connection
// that presents it; ServerTLS asks clients for one). Mount what
// must stay open, such as health checks, outside the middleware.
//
// Permissions are not checked here: they are per tool, so a surface asks
// them where a call names its tool (the engine's permission step and
// Engine.Tools), and a refused call is a NOT_PERMITTED result, not an HTTP
// error. log receives a line for each refused request; nil means
// slog.Default().
func RequireCredentials(v *Verifier, log *slog.Logger) func(http.Handler) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		if !v.Enabled() {
			return next
		}
		var refusals logcut.Limit
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			creds := Credentials{Authorization: r.Header.Values("Authorization")}
			if r.TLS != nil {
				creds.PeerCertificates = r.TLS.PeerCertificates
			}
			id, err := v.Verify(r.Context(), creds)
			if err != nil {
				// Method and path are the client's, up to the port's
				// header limit: cut, as the reason is, so a refusal
				// costs a bounded line; and at most 10 lines every 10 s,
				// so a client refused as fast as it sends does not
				// write the log as fast.
				if ok, held := refusals.Allow(); ok {
					log.Info("unauthenticated request refused", "method", logcut.String(r.Method), "path", logcut.String(r.URL.Path), "peer", r.RemoteAddr, "reason", err.Error(), "not_logged_before", held)
				}
				challenge := "Bearer"
				if v.jwt != nil {
					// Where MCP clients learn whom to ask for a token
					// (the MCP authorization spec; RFC 9728).
					challenge += ` resource_metadata="` + v.jwt.resourceBase(r) + ResourceMetadataPath + `"`
				}
				w.Header().Set("WWW-Authenticate", challenge)
				writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
				return
			}
			next.ServeHTTP(w, r.WithContext(engine.WithIdentity(r.Context(), id)))
		})
	}
}

// writeError answers with status and a Connect error body: its code (in
// Connect's spelling, "unauthenticated", "permission_denied", …) and
// message.
func writeError(w http.ResponseWriter, status int, code, message string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the reasons quote "Bearer <token>"
	_ = enc.Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
}

// ResourceMetadataPath is where an HTTP port serves its OAuth protected
// resource metadata (RFC 9728), and ResourceMetadataPath+"/mcp" that of
// its MCP endpoint: the document that tells MCP clients which issuer
// signs the tokens it accepts.
const ResourceMetadataPath = "/.well-known/oauth-protected-resource"

// ResourceMetadata returns the handler of ResourceMetadataPath (and of
// ResourceMetadataPath+"/mcp"), to be served without credentials: the MCP
// endpoint as the resource (auth.oidc.resource, or /mcp on the request's
// own scheme and host), the OIDC issuer as its authorization server,
// tokens in the Authorization header. nil when v accepts no JWTs.
func ResourceMetadata(v *Verifier) http.Handler {
	if v.jwt == nil {
		return nil
	}
	j := v.jwt
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource := j.cfg.Resource
		if resource == "" {
			resource = j.resourceBase(r) + "/mcp"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_ = json.NewEncoder(w).Encode(&oauthex.ProtectedResourceMetadata{
			Resource:               resource,
			AuthorizationServers:   []string{j.cfg.Issuer},
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "toolwire",
		})
	})
}

// resourceBase is the scheme and host the metadata's URLs start with:
// auth.oidc.resource's, or the request's own (https when it came over
// TLS), its host held to the characters a host may have.
func (j *jwtVerifier) resourceBase(r *http.Request) string {
	if j.cfg.Resource != "" {
		if u, err := url.Parse(j.cfg.Resource); err == nil {
			return u.Scheme + "://" + u.Host
		}
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".-:[]", c) {
			return c
		}
		return -1
	}, r.Host)
	return scheme + "://" + host
}
