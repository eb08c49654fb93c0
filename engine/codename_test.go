package engine

import "testing"

// TestCodeName holds the one spelling of each code and that a code the
// engine does not define is "unknown", never a success.
func TestCodeName(t *testing.T) {
	for c, want := range map[Code]string{
		OK: "ok", Canceled: "canceled", Unknown: "unknown", InvalidArgument: "invalid_argument", DeadlineExceeded: "deadline_exceeded",
		ResourceExhausted: "resource_exhausted", Unavailable: "unavailable", Internal: "internal", NotFound: "not_found",
		PermissionDenied: "permission_denied", Unauthenticated: "unauthenticated", Code(99): "unknown", Code(-1): "unknown",
	} {
		if got := c.Name(); got != want {
			t.Errorf("%v.Name() = %q, want %q", c, got, want)
		}
	}
}
