// Package offer puts the tools of one connection of a source (an MCP
// server, a remote mount) into the registry as that source's tools, and
// logs what it could not offer. It is shared by the sources that keep
// connections, so each logs the same way; it imports only tools.
package offer

import (
	"log/slog"

	"github.com/toolwire/toolwire/tools"
)

// Tools are one connection's tools in a registry. Only the connection's
// run loop may call Set.
type Tools struct {
	src     tools.SourceTools
	reg     *tools.Registry
	kind    string // names the source in log lines: "MCP", "remote"
	whose   string // names its tools in the error line: "the MCP server's"
	offered bool   // the last Set offered tools
}

// New returns the tools of the registry's source id; kind and whose name
// it in log lines.
func New(reg *tools.Registry, id, kind, whose string) *Tools {
	return &Tools{src: reg.Source(id), reg: reg, kind: kind, whose: whose}
}

// Set replaces the connection's tools with list in one update. A name
// another tool holds is skipped with a log line, once; the tool is offered
// when that name is free again (see tools.Registry). An update is logged
// when tools are offered or stop being offered.
func (o *Tools) Set(list []tools.Tool, log *slog.Logger) {
	skipped, err := o.src.Set(list...)
	if err != nil {
		log.Error("cannot update "+o.whose+" tools", "error", err)
		return
	}
	for _, n := range skipped {
		owner, _ := o.reg.Owner(n)
		log.Error("skipping "+o.kind+" tool: the name is taken by another tool", "tool", n, "owner", owner)
	}
	if len(list) > 0 || o.offered {
		log.Info(o.kind+" tools updated", "tools", o.served(list), "revision", o.reg.Snapshot().Revision())
	}
	o.offered = len(list) > 0
}

// served are the names of list the registry serves as the source's.
func (o *Tools) served(list []tools.Tool) []string {
	var names []string
	for _, t := range list {
		if o.src.Serves(t.Name) {
			names = append(names, t.Name)
		}
	}
	return names
}
