package engine

// codeWireNames are the codes' names on the wire, in lower snake case.
var codeWireNames = [...]string{
	OK:                "ok",
	Canceled:          "canceled",
	Unknown:           "unknown",
	InvalidArgument:   "invalid_argument",
	DeadlineExceeded:  "deadline_exceeded",
	ResourceExhausted: "resource_exhausted",
	Unavailable:       "unavailable",
	Internal:          "internal",
	NotFound:          "not_found",
	PermissionDenied:  "permission_denied",
	Unauthenticated:   "unauthenticated",
}

// Name is c's one spelling on the wire of the surfaces that name codes in
// text: lower snake case, as the Connect protocol spells them
// ("invalid_argument", "canceled"), for the HTTP port's Connect errors and
// refusals and the MCP surface's data.code alike; "unknown" for a code the
// engine does not define. (String is gRPC's spelling, "InvalidArgument".)
func (c Code) Name() string {
	if c >= 0 && int(c) < len(codeWireNames) {
		return codeWireNames[c]
	}
	return "unknown"
}
