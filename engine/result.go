package engine

import (
	"fmt"
	"strings"
	"unicode/utf8"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// shape converts a tool's result into the content of a CallResult, capping
// its size at limit bytes. What does not fit is cut (text) or left out
// (images, structured content, details) with a visible marker, and the full
// size is reported. The marker summarizes what was left out, so it stays
// short however many blocks the tool returned.
//
// Blocks are bounded in number too, not only in bytes: each costs a
// message its tags and lengths and the server three allocations, empty or
// not, so at most limit/blockCost of them are kept (at least one).
func shape(res *tools.Result, limit int, out *toolwirev1.CallResult) {
	size := len(res.StructuredContent) + len(res.Details)
	for _, c := range res.Content {
		size += len(c.Text) + len(c.Data)
	}
	out.OriginalSize = uint64(size)
	out.IsError = res.IsError
	budget := limit
	maxBlocks := max(limit/blockCost, 1)
	var images, imageBytes, textBytes, blocks int // left out
	var omitted []string
	out.Content = make([]*toolwirev1.Content, 0, min(len(res.Content), maxBlocks)+1)
	for _, c := range res.Content {
		if len(out.Content) == maxBlocks {
			blocks++
			continue
		}
		if c.Data != nil {
			if len(c.Data) > budget {
				images, imageBytes = images+1, imageBytes+len(c.Data)
				continue
			}
			budget -= len(c.Data)
			out.Content = append(out.Content, &toolwirev1.Content{Block: &toolwirev1.Content_Image{
				Image: &toolwirev1.ImageContent{Data: c.Data, MimeType: c.MIMEType}}})
			continue
		}
		text := c.Text
		if len(text) > budget {
			text = cutUTF8(text, budget)
			textBytes += len(c.Text) - len(text)
		}
		budget -= len(text)
		out.Content = append(out.Content, textBlock(text))
	}
	if blocks > 0 {
		omitted = append(omitted, fmt.Sprintf("%d content blocks past the first %d", blocks, maxBlocks))
	}
	switch {
	case images == 1:
		omitted = append(omitted, fmt.Sprintf("an image of %d bytes", imageBytes))
	case images > 1:
		omitted = append(omitted, fmt.Sprintf("%d images of %d bytes in all", images, imageBytes))
	}
	if textBytes > 0 {
		omitted = append(omitted, fmt.Sprintf("%d bytes of text", textBytes))
	}
	if n := len(res.StructuredContent); n > 0 {
		if n > budget {
			omitted = append(omitted, fmt.Sprintf("structured content of %d bytes", n))
		} else {
			budget -= n
			out.StructuredContent = string(res.StructuredContent)
		}
	}
	if n := len(res.Details); n > 0 {
		if n > budget {
			omitted = append(omitted, fmt.Sprintf("details of %d bytes", n))
		} else {
			out.Details = string(res.Details)
		}
	}
	if len(omitted) > 0 {
		out.Truncated = true
		marker := fmt.Sprintf("[output truncated: the result was %d bytes, over the %d-byte limit; left out:", size, limit)
		if size <= limit {
			marker = fmt.Sprintf("[output truncated: the result was %d blocks, over the %d-block limit; left out:", len(res.Content), maxBlocks)
		}
		for i, o := range omitted {
			if i > 0 {
				marker += ","
			}
			marker += " " + o
		}
		out.Content = append(out.Content, textBlock(marker+"]"))
	}
}

// payload is the size of res's output as shape counts it, besides a
// truncation marker.
func payload(res *toolwirev1.CallResult) int {
	blocks := res.GetContent()
	if res.GetTruncated() && len(blocks) > 0 {
		blocks = blocks[:len(blocks)-1] // the marker
	}
	n := len(res.GetStructuredContent()) + len(res.GetDetails())
	for _, c := range blocks {
		n += len(c.GetText().GetText()) + len(c.GetImage().GetData())
	}
	return n
}

// bound caps a result that did not come through shape (an error the server
// wrote, which may quote the input, or a replay recorded under a larger
// limit) as shape would have.
func bound(res *toolwirev1.CallResult, limit int) {
	if payload(res) <= limit {
		return
	}
	blocks := res.GetContent()
	if res.GetTruncated() {
		blocks = blocks[:len(blocks)-1] // shape writes a new marker
	}
	tr := &tools.Result{StructuredContent: []byte(res.GetStructuredContent()), Details: []byte(res.GetDetails()), IsError: res.GetIsError(),
		Content: make([]tools.Content, len(blocks))}
	for i, c := range blocks {
		if img := c.GetImage(); img != nil {
			data := img.GetData()
			if data == nil {
				data = []byte{} // still an image to shape
			}
			tr.Content[i] = tools.Content{Data: data, MIMEType: img.GetMimeType()}
		} else {
			tr.Content[i] = tools.Content{Text: c.GetText().GetText()}
		}
	}
	original := res.GetOriginalSize()
	res.StructuredContent, res.Details = "", ""
	shape(tr, limit, res)
	res.OriginalSize = max(res.OriginalSize, original)
}

// boundKeepingDetails is bound with res's details kept whole: their room
// is taken from the content and structured content, which bound would
// otherwise keep first. For details the server writes that the caller
// must see (a result's idempotency note).
func boundKeepingDetails(res *toolwirev1.CallResult, limit int) {
	if payload(res) <= limit {
		return
	}
	details := res.Details
	res.Details = ""
	bound(res, max(limit-len(details), 0))
	res.Details = details
}

// validUTF8 replaces what is not UTF-8 in res's strings with U+FFFD.
// Protocol buffers' strings must be UTF-8: one that is not fails the
// marshal of its event, ending the stream of every call in the batch, and
// of the result's idempotency record and stored event. Tools pass on what
// upstreams send (a status line, a body, a gRPC status message), so the
// results are mended here, where every result goes through, rather than
// at each source.
func validUTF8(res *toolwirev1.CallResult) {
	for _, c := range res.GetContent() {
		switch b := c.GetBlock().(type) {
		case *toolwirev1.Content_Text:
			b.Text.Text = mendUTF8(b.Text.GetText())
		case *toolwirev1.Content_Image:
			b.Image.MimeType = mendUTF8(b.Image.GetMimeType())
		}
	}
	res.StructuredContent = mendUTF8(res.StructuredContent)
	res.Details = mendUTF8(res.Details)
}

// mendUTF8 returns s with each run of bytes that are not UTF-8 replaced by
// U+FFFD (within JSON, such bytes can only be in a string, which stays
// one), and s itself when it is UTF-8.
func mendUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// errorResult fills a result the model reads as a failure of the given kind.
func errorResult(out *toolwirev1.CallResult, kind toolwirev1.ErrorKind, msg string) {
	out.IsError = true
	out.ErrorKind = kind
	out.Content = []*toolwirev1.Content{textBlock(msg)}
}

// boundProgress cuts a progress report's message and output to limit bytes
// together, marking the cut, so that no report outgrows a message.
func boundProgress(p *tools.Progress, limit int) {
	if len(p.Message)+len(p.Output) <= limit {
		return
	}
	if n := len(p.Output); n > limit {
		p.Output = cutUTF8(p.Output, limit) + fmt.Sprintf("[output cut: this chunk was %d bytes, over the %d-byte limit]", n, limit)
	}
	if n := len(p.Message); n > limit-min(len(p.Output), limit) {
		p.Message = cutUTF8(p.Message, limit-min(len(p.Output), limit)) + fmt.Sprintf("[message cut from %d bytes]", n)
	}
}

// blockCost is what a content block counts for in the cap on their number:
// about what its tags and lengths take in a message.
const blockCost = 16

// tooLarge reports whether a result event would exceed the message size
// limit even though its output is within MaxResultBytes (which withDefaults
// keeps below it): only a result of very many blocks can. proto.Size is
// skipped when the sum of the bounds fits.
func tooLarge(res *toolwirev1.CallResult, cfg *Config) bool {
	const perBlock = 16 // a block's tags and lengths, at most
	if cfg.MaxResultBytes+perBlock*len(res.GetContent())+eventOverhead <= cfg.MaxMessageBytes {
		return false
	}
	// A unary surface's response wraps the result as the event does: one
	// field of one message, the same size.
	return proto.Size(resultEventFor(res)) > cfg.MaxMessageBytes
}
