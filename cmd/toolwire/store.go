package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/toolwire/toolwire/service"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/storeurl"
)

// StoreConfig is the part of serveConfig about the idempotency and session
// store; it is embedded, so its keys sit at the top level of the YAML file.
type StoreConfig struct {
	Store            string   `json:"store"`             // memory, bolt:///path/file.db or redis://host:port/db
	IdempotencyTTL   Duration `json:"idempotency_ttl"`   // how long completed calls are replayed
	IdempotencyLease Duration `json:"idempotency_lease"` // how long a dead replica's claim blocks retries
	SessionTTL       Duration `json:"session_ttl"`       // how long session variables live
}

func storeFlags(fs *flag.FlagSet, cfg *StoreConfig) {
	fs.StringVar(&cfg.Store, "store", cfg.Store, "idempotency and session `store`: memory, bolt:///path/to/file.db or redis://host:port/db (default memory)")
	durationVar(fs, &cfg.IdempotencyTTL, "idempotency-ttl", "how long a completed call with an idempotency key is replayed instead of run (0: 24h)")
	durationVar(fs, &cfg.IdempotencyLease, "idempotency-lease", "how long a claim on a running call lasts unless renewed; bounds how long retries wait for a replica that died (0: 10s)")
	durationVar(fs, &cfg.SessionTTL, "session-ttl", "how long a session variable lives after it was last set (0: 24h)")
}

// storeKind names the kind of store rawURL opens, for the log: memory,
// bolt or redis. The URL itself may hold a password, so it is not logged.
func storeKind(rawURL string) string {
	scheme, _, ok := strings.Cut(rawURL, ":")
	if !ok || scheme == "" {
		scheme = rawURL
	}
	switch scheme {
	case "", "memory":
		return "memory"
	case "rediss":
		return "redis"
	}
	return scheme
}

// openStore opens the configured store and puts it into sc, as both its
// idempotency records and its sessions; the caller closes it after the
// server has stopped.
func (cfg StoreConfig) openStore(ctx context.Context, sc *service.Config) (store.Store, error) {
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := storeurl.Open(openCtx, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	sc.Idempotency, sc.Sessions = st, st
	sc.IdempotencyTTL = time.Duration(cfg.IdempotencyTTL)
	sc.IdempotencyLease = time.Duration(cfg.IdempotencyLease)
	sc.SessionTTL = time.Duration(cfg.SessionTTL)
	return st, nil
}
