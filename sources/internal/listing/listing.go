// Package listing bounds what a source keeps of an upstream's listing of
// tools: how many tools, the bytes of their declarations, and how many
// pages, with no page cursor twice. A listing past a bound is cut there,
// so an upstream that lists without end, or declarations too large to
// hold, costs a bounded amount of memory whatever it sends. The MCP
// servers, the remote mounts and the gRPC sources use it; it imports only
// tools.
package listing

import (
	"crypto/sha256"
	"fmt"

	"github.com/toolwire/toolwire/tools"
)

// Bounds are the most one listing may hold.
type Bounds struct {
	Tools int // tools read
	Bytes int // names, titles, descriptions and schemas kept
	Pages int // pages read
}

// Default are the bounds of a source's listing unless a test lowers them:
// 10,000 tools, 64 MiB (a server's max_list_bytes default) and 1,000
// pages, as an MCP server's tools/list has.
var Default = Bounds{Tools: 10_000, Bytes: 64 << 20, Pages: 1_000}

// Listing counts one listing against Max; Cut is why it stops short, once
// it must.
type Listing struct {
	Max Bounds
	Cut error

	tools, bytes, pages int
	cursors             map[[sha256.Size]byte]bool
}

// Tool counts a listed tool, and reports whether it may be read.
func (l *Listing) Tool() bool {
	if l.tools >= l.Max.Tools {
		l.Cut = fmt.Errorf("the server lists more than %d tools", l.Max.Tools)
		return false
	}
	l.tools++
	return true
}

// Keep counts what is kept of d, and reports whether it may be.
func (l *Listing) Keep(d tools.Tool) bool {
	l.bytes += Size(d)
	if l.bytes > l.Max.Bytes {
		l.Cut = fmt.Errorf("the server's tools take more than %d MiB", l.Max.Bytes>>20)
		return false
	}
	return true
}

// Size is what a declaration holds: its name, title, description and
// schemas.
func Size(d tools.Tool) int {
	return len(d.Name) + len(d.Title) + len(d.Description) + len(d.InputSchema) + len(d.OutputSchema)
}

// Next counts a page that ended with cursor, and reports whether the page
// it names is to be read.
func (l *Listing) Next(cursor string) bool {
	l.pages++
	switch {
	case cursor == "":
		return false
	case l.tools >= l.Max.Tools: // a page more could only be cut
		l.Cut = fmt.Errorf("the server lists more than %d tools", l.Max.Tools)
		return false
	case l.pages >= l.Max.Pages:
		l.Cut = fmt.Errorf("the server's listing goes on past %d pages", l.Max.Pages)
		return false
	}
	if l.cursors == nil {
		l.cursors = map[[sha256.Size]byte]bool{}
	}
	h := sha256.Sum256([]byte(cursor))
	if l.cursors[h] {
		l.Cut = fmt.Errorf("the server's listing repeats a page (cursor %.40q after %d pages)", cursor, l.pages)
		return false
	}
	l.cursors[h] = true
	return true
}
