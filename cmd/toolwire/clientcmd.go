package main

import (
	"context"
	"flag"
	"time"

	"github.com/toolwire/toolwire/client"
)

// clientFlags are the flags every client command has.
type clientFlags struct {
	addr    string
	timeout time.Duration
	sec     clientSecurity // auth.go
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", defaultAddr, "server `address`")
	fs.DurationVar(&c.timeout, "timeout", 0, "deadline for the whole command (0: none)")
	c.sec.register(fs)
}

// dial returns a client and a context carrying the --timeout deadline; the
// returned function releases both.
func (c *clientFlags) dial(ctx context.Context) (*client.Client, context.Context, func(), error) {
	opts, err := c.sec.options(c.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := client.New(c.addr, opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	cancel := func() {}
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}
