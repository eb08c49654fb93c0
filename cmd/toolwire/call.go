package main

import (
	"context"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// runCall runs one call, printing its progress to stderr as it streams and
// then its result to stdout; with --no-progress it runs the call with
// CallTool, the unary fast path, and prints the result alone. An error
// result exits with status 1.
func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("call", `
JSON is the call's arguments, a JSON object; none means {}. Flags may come
before or after NAME. Image blocks print as [image TYPE, N bytes]; --save-images
writes them to files and adds each one's name to its line. Progress goes to
stderr as the call runs; --no-progress runs it as one unary CallTool instead,
the faster path, and shows nothing until the result.`, stderr)
	cf.register(fs)
	id := fs.String("id", "call-1", "the call's `ID`")
	callTimeout := fs.Duration("call-timeout", 0, "the call's own timeout (0: the tool's or server's)")
	session := fs.String("session", "", "session `ID` the call belongs to")
	idemKey := fs.String("idempotency-key", "", "the call's idempotency `key`: a call with a key that completed before is replayed, not run")
	asJSON := fs.Bool("json", false, "print the whole CallResult as protojson instead of its text")
	saveImages := fs.String("save-images", "", "write the result's images into `directory`, as CALLID-N.EXT")
	noProgress := fs.Bool("no-progress", false, "show no progress: run the call with CallTool (unary) instead of a streamed batch of one")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return cmdUsageError("call", "call: want a tool name and optionally its arguments as JSON")
	}
	call := client.Call(*id, fs.Arg(0), fs.Arg(1))
	if *callTimeout > 0 {
		call.Timeout = durationpb.New(*callTimeout)
	}
	call.IdempotencyKey = *idemKey

	return clientCommand(ctx, stderr, func() error {
		c, ctx, done, err := cf.dial(ctx)
		if err != nil {
			return err
		}
		defer done()
		if *noProgress {
			r, err := c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: call, SessionId: *session})
			if err != nil {
				return cf.explain("call", err)
			}
			return printResult(r, *asJSON, *saveImages, stdout, stderr)
		}
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call}, SessionId: *session}
		b, err := client.Collect(newProgressView(stderr).show(c.ExecuteBatch(ctx, req)))
		if err != nil {
			return cf.explain("call", err)
		}
		return printResult(b.Results[0], *asJSON, *saveImages, stdout, stderr)
	})
}

// printResult prints a call's result: its content blocks on stdout (or the
// whole CallResult as protojson), and what else there is to know on
// stderr. An error result exits with status 1.
func printResult(r *toolwirev1.CallResult, asJSON bool, imageDir string, stdout, stderr io.Writer) error {
	var saved []string // the images' files, in order
	var saveErr error
	if imageDir != "" {
		saved, saveErr = saveImages(r, imageDir)
	}
	if asJSON {
		out, err := protojson.MarshalOptions{Multiline: true}.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", out)
		for _, name := range saved {
			fmt.Fprintf(stderr, "saved %s\n", name)
		}
	} else {
		n := 0
		for _, c := range r.GetContent() {
			text := c.GetText().GetText()
			if img := c.GetImage(); img != nil {
				text = fmt.Sprintf("[image %s, %d bytes]", img.GetMimeType(), len(img.GetData()))
				if n < len(saved) {
					text = fmt.Sprintf("[image %s, %d bytes, saved as %s]", img.GetMimeType(), len(img.GetData()), saved[n])
				}
				n++
			}
			if text != "" && !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			io.WriteString(stdout, text)
		}
		if s := r.GetStructuredContent(); s != "" && strings.TrimSpace(s) != strings.TrimSpace(client.Text(r)) {
			fmt.Fprintf(stderr, "structured content: %s\n", s)
		}
	}
	if saveErr != nil {
		return saveErr
	}
	if r.GetReplayed() {
		fmt.Fprintln(stderr, "replayed from the idempotency store; the tool did not run again")
	}
	if r.GetTruncated() {
		fmt.Fprintf(stderr, "the result was truncated from %d bytes\n", r.GetOriginalSize())
	}
	if r.GetIsError() {
		fmt.Fprintf(stderr, "%s failed: %s\n", r.GetToolName(), r.GetErrorKind())
		return &exitError{code: 1}
	}
	return nil
}

// imageExt is the usual extension of the image types tools return; others
// get the first the mime package knows.
var imageExt = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}

// saveImages writes r's image blocks into dir as CALLID-N.EXT, N counting
// the result's images from 1, and returns the names of the files written.
func saveImages(r *toolwirev1.CallResult, dir string) ([]string, error) {
	var saved []string
	n := 0
	for _, c := range r.GetContent() {
		img := c.GetImage()
		if img == nil {
			continue
		}
		n++
		ext, ok := imageExt[img.GetMimeType()]
		if exts, _ := mime.ExtensionsByType(img.GetMimeType()); !ok && len(exts) > 0 {
			ext = exts[0]
		} else if !ok {
			ext = ".bin"
		}
		// The call ID comes from the server's echo of ours; keep it one
		// file name, whatever it holds.
		name := filepath.Join(dir, fmt.Sprintf("%s-%d%s", strings.NewReplacer("/", "_", `\`, "_").Replace(r.GetCallId()), n, ext))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return saved, fmt.Errorf("--save-images: %w", err)
		}
		if err := os.WriteFile(name, img.GetData(), 0o644); err != nil {
			return saved, fmt.Errorf("--save-images: %w", err)
		}
		saved = append(saved, name)
	}
	return saved, nil
}
