package client_test

import (
	"crypto/tls"
	"crypto/x509"
	"log"
	"os"

	"github.com/toolwire/toolwire/client"
	"google.golang.org/grpc/credentials"
)

// A server with TLS and bearer tokens: trust its CA, present a client
// certificate if it asks for one (mutual TLS), and send the token.
func ExampleWithToken() {
	caPEM, err := os.ReadFile("/etc/toolwire/ca.crt")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tlsConfig := &tls.Config{RootCAs: roots}
	// For mutual TLS, instead of (or besides) the token:
	//   cert, err := tls.LoadX509KeyPair("agent.crt", "agent.key")
	//   tlsConfig.Certificates = []tls.Certificate{cert}
	c, err := client.New("toolwire.agents.svc:50051",
		client.WithTransportCredentials(credentials.NewTLS(tlsConfig)),
		client.WithToken(os.Getenv("TOOLWIRE_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
