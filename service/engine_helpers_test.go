package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// What the surface's tests read of the engine's bounds.
const (
	maxListedNames = engine.MaxListedNames
	maxIDBytes     = engine.MaxIDBytes
	maxNameBytes   = engine.MaxNameBytes
)

// checkBatch is the status the server answers a batch the engine's Check
// rejects with.
func (s *Server) checkBatch(req *toolwirev1.ExecuteBatchRequest) error {
	return grpcError(s.engine.Check(req))
}

// payload is the size of res's output besides a truncation marker, as the
// engine's result shaping counts it.
func payload(res *toolwirev1.CallResult) int {
	blocks := res.GetContent()
	if res.GetTruncated() && len(blocks) > 0 {
		blocks = blocks[:len(blocks)-1] // the marker
	}
	n := len(res.GetStructuredContent()) + len(res.GetDetails())
	for _, c := range blocks {
		n += len(c.GetText().GetText()) + len(c.GetImage().GetData())
	}
	return n
}

// fingerprint is how the engine identifies a call's arguments in an
// idempotency record (sha256 of the JSON with sorted keys): a test that
// plants a record must write the same. Records outlive releases, so a
// change here is a change of the stored format.
func fingerprint(args json.RawMessage) string {
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v any
	canonical := []byte(args)
	if d.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canonical = b
		}
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// abandoned is how many tools the server's engine abandoned for ignoring
// cancellation.
func (s *Server) abandoned() int64 { return s.engine.Stats().Abandoned }

// stopCalls cancels the calls of every running batch, as Shutdown does when
// the drain timeout has passed.
func (s *Server) stopCalls() { s.engine.CancelCalls() }
