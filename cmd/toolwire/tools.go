package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// runTools prints the tools a server offers (every one, a page at a time
// as the client lists them), or with --search the best matches of a query.
func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("tools", "", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the ListToolsResponse (SearchToolsResponse with --search) as protojson")
	query := fs.String("search", "", "print only the tools that match this query, best first (words and \"phrases\" in the name, title, description or source)")
	most := fs.Int("max", 0, "with --search, the most tools to print (0: the server's default, 10; at most 100)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cmdUsageError("tools", "tools: unexpected arguments %q", fs.Args())
	}
	if *most != 0 && *query == "" {
		return cmdUsageError("tools", "tools: --max goes with --search")
	}
	if *most < 0 || *most > math.MaxInt32 {
		return cmdUsageError("tools", "tools: --max %d: want 0 to 100", *most)
	}
	return clientCommand(ctx, stderr, func() error {
		c, ctx, done, err := cf.dial(ctx)
		if err != nil {
			return err
		}
		defer done()
		if *query != "" {
			found, err := c.SearchTools(ctx, &toolwirev1.SearchToolsRequest{Query: *query, MaxResults: int32(*most)})
			if err != nil {
				return cf.explain("searching tools", err)
			}
			if *asJSON {
				return printJSON(found, stdout)
			}
			if err := printTools(found.GetTools(), stdout); err != nil {
				return err
			}
			if n := int32(len(found.GetTools())); n < found.GetTotalMatches() {
				fmt.Fprintf(stderr, "%d of %d matching tools; --max shows more\n", n, found.GetTotalMatches())
			}
			return nil
		}
		resp, err := c.ListTools(ctx)
		if err != nil {
			return cf.explain("listing tools", err)
		}
		if *asJSON {
			return printJSON(resp, stdout)
		}
		return printTools(resp.GetTools(), stdout)
	})
}

// printJSON prints m as protojson.
func printJSON(m proto.Message, stdout io.Writer) error {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// printTools prints ts as a table.
func printTools(ts []*toolwirev1.Tool, stdout io.Writer) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tANNOTATIONS\tDESCRIPTION")
	for _, t := range ts {
		desc, _, _ := strings.Cut(t.GetDescription(), "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.GetName(), annotations(t.GetAnnotations()), desc)
	}
	return tw.Flush()
}

// annotations lists the hints that are set, or "-".
func annotations(a *toolwirev1.ToolAnnotations) string {
	var set []string
	for _, h := range []struct {
		on   bool
		name string
	}{
		{a.GetReadOnly(), "read-only"},
		{a.GetDestructive(), "destructive"},
		{a.GetIdempotent(), "idempotent"},
		{a.GetOpenWorld(), "open-world"},
	} {
		if h.on {
			set = append(set, h.name)
		}
	}
	if len(set) == 0 {
		return "-"
	}
	return strings.Join(set, ",")
}
