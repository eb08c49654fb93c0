package storeurl

import "crypto/tls"

// TLSSettings returns the TLS settings c gives a Redis store's connections.
func TLSSettings(c Config) (*tls.Config, error) {
	t, _, err := c.tls()
	return t, err
}
