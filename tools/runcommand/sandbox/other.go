//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox/internal/supervisor"
)

var errUnsupported = errors.New("the sandbox needs Linux")

func probe(cfg Config) Restrictions {
	return Restrictions{Mode: cfg.Mode, Network: cfg.Network, Identity: IdentityServer, Aggregate: "none", Missing: []string{"everything (the sandbox needs Linux)"}}
}

func cannotSwitchUser() string { return "the sandbox needs Linux" }

// Run is one command to run in the sandbox.
type Run struct {
	Path     string
	Argv     []string
	Dir      string
	Env      []string
	Writable []string
	Output   *os.File
	Grace    time.Duration
	User     *User
	// MinFreeBytes: see the Linux Run.
	MinFreeBytes uint64
}

// User is the uid and gid a session's commands run under.
type User = supervisor.User

// Process is a supervised command.
type Process struct{}

// Start fails: the sandbox needs Linux.
func (s *Sandbox) Start(ctx context.Context, run Run) (*Process, error) { return nil, errUnsupported }

// Wait fails: the sandbox needs Linux.
func (p *Process) Wait() (Exit, error) { return Exit{}, errUnsupported }

// PID returns 0.
func (p *Process) PID() int { return 0 }

type pool struct{}

func newPool(*Sandbox) *pool { return nil }

func (*pool) close() {}

type cgroups struct{}

func findCgroups(Config) (*cgroups, string) { return nil, "none" }

type rules struct{ sockets, sysvIPC, notify bool }

func filter(rules) (supervisor.Filter, map[int]string, error) { return nil, nil, errUnsupported }
