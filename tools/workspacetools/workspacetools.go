// Package workspacetools assembles the tools a coding agent needs over one
// workspace folder: read_file, write_file, edit_file, list_files, find_files
// and, when enabled, run_command. Each tool lives in its own package; the
// confinement they share lives in package workspace.
//
// It imports tools/ and the built-ins' packages, never engine/, service/,
// sources/, store/ or client/: the server reaches the tools only through the
// registry.
package workspacetools

import (
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/editfile"
	"github.com/toolwire/toolwire/tools/findfiles"
	"github.com/toolwire/toolwire/tools/listfiles"
	"github.com/toolwire/toolwire/tools/readfile"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/writefile"
)

// Options configure the workspace tools. The zero value serves the file
// tools with their defaults and no run_command.
type Options struct {
	RunCommand bool               // offer run_command
	Command    runcommand.Options // run_command's settings, shell mode and environment among them
	Read       readfile.Options
	List       listfiles.Options
	Find       findfiles.Options
}

// Tools returns the workspace tools, in name order, over the workspace ws
// gives each call: a *workspace.Workspace for one shared folder,
// *workspace.Sessions for a folder per session.
func Tools(ws workspace.Resolver, opts Options) []tools.Tool {
	ts := []tools.Tool{
		editfile.New(ws),
		findfiles.New(ws, opts.Find),
		listfiles.New(ws, opts.List),
		readfile.New(ws, opts.Read),
	}
	if opts.RunCommand {
		ts = append(ts, runcommand.New(ws, opts.Command))
	}
	return append(ts, writefile.New(ws))
}
