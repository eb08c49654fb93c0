package auth

import (
	"net"

	"github.com/toolwire/toolwire/auth"
	"google.golang.org/grpc/credentials"
)

// ServerCredentials returns TLS transport credentials for a server whose
// certificate and key are in the PEM files certFile and keyFile
// (auth.ServerTLS: read again when they change, so a rotated certificate
// takes effect for new connections without a restart).
//
// When v accepts client certificates, clients are asked for one, and v
// checks it after the handshake (see ClientCertInfo) and again for each
// RPC (the interceptors), so that one that expires, or whose CA is
// dropped, stops naming its caller on the connections already open.
// A connection without one is still accepted, so that health probes get
// through; the interceptors refuse its other RPCs with UNAUTHENTICATED, and
// a certificate that fails the check (expired, from another CA) is refused
// the same way, with the reason. v may be nil: no client certificates.
func ServerCredentials(certFile, keyFile string, v *auth.Verifier) (credentials.TransportCredentials, error) {
	cfg, err := auth.ServerTLS(certFile, keyFile, v)
	if err != nil {
		return nil, err
	}
	creds := credentials.NewTLS(cfg)
	if v == nil || !v.AcceptsCertificates() {
		return creds, nil
	}
	return &clientCertCreds{TransportCredentials: creds, v: v}, nil
}

// ClientCertInfo is the AuthInfo of a connection whose client certificate
// ServerCredentials had its Verifier check: the TLS state, and the
// certificate as auth.Verifier.CheckCertificate found it at the handshake
// (whether one was presented, the caller it names or why it is not
// accepted). The interceptors check the chain in the TLS state again for
// each RPC.
type ClientCertInfo struct {
	credentials.TLSInfo
	auth.Certificate
}

type clientCertCreds struct {
	credentials.TransportCredentials
	v *auth.Verifier
}

func (c *clientCertCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, ai, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		return conn, ai, nil
	}
	return conn, ClientCertInfo{TLSInfo: info, Certificate: c.v.CheckCertificate(info.State.PeerCertificates)}, nil
}

func (c *clientCertCreds) Clone() credentials.TransportCredentials {
	return &clientCertCreds{TransportCredentials: c.TransportCredentials.Clone(), v: c.v}
}
