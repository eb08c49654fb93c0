package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// runTools prints the tools a server offers.
func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("tools", "", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the ListToolsResponse as protojson")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cmdUsageError("tools", "tools: unexpected arguments %q", fs.Args())
	}
	return clientCommand(ctx, stderr, func() error {
		c, ctx, done, err := cf.dial(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.ListTools(ctx)
		if err != nil {
			return cf.explain("listing tools", err)
		}
		return printTools(resp, *asJSON, stdout)
	})
}

// printTools prints the tools of resp as a table, or resp as protojson.
func printTools(resp *toolwirev1.ListToolsResponse, asJSON bool, stdout io.Writer) error {
	if asJSON {
		b, err := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tANNOTATIONS\tDESCRIPTION")
	for _, t := range resp.GetTools() {
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
