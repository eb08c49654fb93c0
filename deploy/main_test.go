package deploy

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/resolver/dns"
)

func TestMain(m *testing.M) {
	// The DNS resolver looks again at most every 30 s by default: the
	// balancing tests' clients follow their DNS stub's answers sooner.
	dns.SetMinResolutionInterval(50 * time.Millisecond)
	goleak.VerifyTestMain(removingImage{m})
}
