package client

import (
	"context"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // accept gzip, which the server answers large listings with
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	// defaultPageSize is the tools ListTools asks for per page unless
	// WithListPageSize says otherwise: the most a server's page holds.
	defaultPageSize = 1000
	// listRecvBytes is the largest ListTools or SearchTools response the
	// client receives: a page stays within the server's max_message_bytes
	// (4 MiB by default), but a page holding one very large declaration,
	// or an old server's whole listing, may be as large as a server sends
	// in one (its max_list_bytes, 64 MiB by default).
	listRecvBytes = 64 << 20
	// listRestarts is how many times ListTools starts over when the tools
	// change between its pages.
	listRestarts = 3
	// defaultListBytes and defaultListPages bound one listing unless
	// WithListLimits says otherwise: what a server's largest listing in one
	// response may carry (its max_list_bytes default), and pages enough for
	// ten million tools at the default page size.
	defaultListBytes = 64 << 20
	defaultListPages = 10_000
)

// WithListLimits bounds what one ListTools reads: maxBytes of responses
// (their encoded size, summed over the pages) and maxPages pages. A server
// whose pages go on past either, or that sends a page token twice, gets an
// error rather than a client that reads, and holds, for as long as it
// sends. Default 64 MiB (a server's max_list_bytes default, the most it
// lists in one response) and 10,000 pages; a value of 0 or less keeps its
// default.
func WithListLimits(maxBytes, maxPages int) Option {
	return func(o *options) {
		if maxBytes > 0 {
			o.maxListBytes = maxBytes
		}
		if maxPages > 0 {
			o.maxListPages = maxPages
		}
	}
}

// WithListPageSize sets how many tools ListTools asks for per page. Default
// (and for n of 0 or less) 1000, the most a server's page holds; a server
// also cuts a page at its max_message_bytes.
func WithListPageSize(n int32) Option {
	return func(o *options) {
		if n > 0 {
			o.pageSize = n
		}
	}
}

// ListTools returns the declarations of every tool the caller may call,
// sorted by name, and their registry revision, in one response however
// many there are: it asks for them a page at a time and puts the pages
// together. When the tools change between its pages (the server answers
// ABORTED), it starts over, up to three times, so that every tool it
// returns belongs to the one revision it returns. It accepts gzip, which a
// server answers large listings with, and receives responses of up to 64
// MiB; opts come after its own, so grpc.MaxCallRecvMsgSize among them
// overrides that. A server that predates paging answers the first request
// with every tool, which ends the listing at once, whichever page it is
// asked for (behind a balancer, replicas of two versions answer one
// listing's pages).
func (c *Client) ListTools(ctx context.Context, opts ...grpc.CallOption) (*toolwirev1.ListToolsResponse, error) {
	opts = append([]grpc.CallOption{grpc.MaxCallRecvMsgSize(listRecvBytes)}, opts...)
	for restart := 0; ; restart++ {
		all, err := c.listPages(ctx, opts)
		if status.Code(err) == codes.Aborted && restart < listRestarts {
			continue
		}
		return all, err
	}
}

// listPages lists every tool, a page at a time, from the first page.
func (c *Client) listPages(ctx context.Context, opts []grpc.CallOption) (*toolwirev1.ListToolsResponse, error) {
	all := &toolwirev1.ListToolsResponse{}
	read := 0
	tokens := map[string]bool{}
	for page := 1; ; page++ {
		resp, err := c.svc.ListTools(ctx, &toolwirev1.ListToolsRequest{PageSize: c.pageSize, PageToken: all.GetNextPageToken()}, opts...)
		if err != nil {
			return nil, err
		}
		if read += proto.Size(resp); read > c.maxListBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "toolwire: ListTools read %d pages, more than %d MiB, without reaching the last: the listing is larger than the client's bound (WithListLimits)", page, c.maxListBytes>>20)
		}
		if ts := resp.GetTools(); page > 1 && resp.GetNextPageToken() == "" && len(ts) > 0 && ts[0].GetName() <= all.Tools[0].GetName() {
			// A page from the start and the last: a server that predates
			// paging, which a balancer sent this page to in a rolling
			// upgrade, answers a page token with every tool. That answer
			// is the whole listing, of one revision.
			return resp, nil
		}
		if page == 1 {
			all.Revision = resp.GetRevision()
		} else if resp.GetRevision() != all.GetRevision() {
			return nil, status.Errorf(codes.Aborted, "toolwire: the tools changed between pages (revision %s, then %s)", all.GetRevision(), resp.GetRevision())
		}
		// Each page must go on from the last: a server whose pages do not
		// would keep this loop going forever.
		if ts := resp.GetTools(); len(ts) > 0 && len(all.Tools) > 0 && ts[0].GetName() <= all.Tools[len(all.Tools)-1].GetName() {
			return nil, fmt.Errorf("toolwire: page %d of ListTools starts at %q, not after %q: the server's pages do not advance", page, ts[0].GetName(), all.Tools[len(all.Tools)-1].GetName())
		}
		if len(resp.GetTools()) == 0 && resp.GetNextPageToken() != "" {
			return nil, fmt.Errorf("toolwire: page %d of ListTools is empty but not the last: the server's pages do not advance", page)
		}
		all.Tools = append(all.Tools, resp.GetTools()...)
		if all.NextPageToken = resp.GetNextPageToken(); all.NextPageToken == "" {
			return all, nil
		}
		if tokens[all.NextPageToken] {
			return nil, fmt.Errorf("toolwire: page %d of ListTools names a page token it named before: the server's pages do not advance", page)
		}
		tokens[all.NextPageToken] = true
		if page >= c.maxListPages {
			return nil, status.Errorf(codes.ResourceExhausted, "toolwire: ListTools read %d pages without reaching the last: the listing is longer than the client's bound (WithListLimits)", page)
		}
	}
}

// SearchTools returns the tools the caller may call that match
// req.Query, best first, at most req.MaxResults of them (10 when unset,
// 100 at most), and how many match in all: for a runtime that hands its
// model only the tools a step needs. A query matches a tool when each of
// its words, and "quoted phrases", occurs in the tool's name, title,
// description or source, ignoring case. An empty query is
// INVALID_ARGUMENT. It accepts gzip and responses of up to 64 MiB, as
// ListTools does.
func (c *Client) SearchTools(ctx context.Context, req *toolwirev1.SearchToolsRequest, opts ...grpc.CallOption) (*toolwirev1.SearchToolsResponse, error) {
	return c.svc.SearchTools(ctx, req, append([]grpc.CallOption{grpc.MaxCallRecvMsgSize(listRecvBytes)}, opts...)...)
}
