package mcpsource

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// MCP's older HTTP+SSE transport (protocol 2024-11-05) is not streamable
// HTTP: its URL (often …/sse) answers GET with an event stream whose first
// event, "endpoint", names where to POST, and answers a POST itself with
// 404, 405 or 400. toolwire speaks streamable HTTP only, and the SDK said
// just that the initialize POST was refused ("sending "initialize": Not
// Found"), again at every retry, as if the URL were wrong. When the POST
// was refused so, the URL is asked once whether it is such a server, and
// the error says it.

// legacyProbeTimeout bounds the question.
const legacyProbeTimeout = 2 * time.Second

// noteRefused records a POST refused before the session is up (4xx).
func (h *httpSession) noteRefused(r *http.Request, resp *http.Response) {
	if r.Method != http.MethodPost || resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized {
		return
	}
	h.mu.Lock()
	if h.rpc == nil {
		h.refusedPost = true
	}
	h.mu.Unlock()
}

// legacyHint returns err, saying the server speaks the older HTTP+SSE
// transport when its initialize POST was refused and a GET of its URL
// answers with an "endpoint" event.
func (h *httpSession) legacyHint(ctx context.Context, err error) error {
	if h == nil {
		return err
	}
	h.mu.Lock()
	refused := h.refusedPost
	h.mu.Unlock()
	if !refused {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, legacyProbeTimeout)
	defer cancel()
	req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, h.origin.String(), nil)
	if rerr != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	resp, rerr := h.base.RoundTrip(req)
	if rerr != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 8 && sc.Scan(); n++ { // the first event's lines
		if line := strings.TrimSpace(sc.Text()); line == "event: endpoint" || line == "event:endpoint" {
			return fmt.Errorf("%w: the server speaks MCP's older HTTP+SSE transport (2024-11-05), which toolwire does not; give its streamable HTTP endpoint as url (often …/mcp)", err)
		}
	}
	return err
}
