package auth

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolwire/toolwire/auth"
	"google.golang.org/grpc/metadata"
)

// AdmitBounded is Admit with the open methods' bounds given.
func AdmitBounded(v *auth.Verifier, log *slog.Logger, health, reflection int, readTimeout time.Duration) func(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
	return admit(v, log, newOpenGate(health, reflection, readTimeout))
}
