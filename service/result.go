package service

import (
	"fmt"
	"unicode/utf8"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// shape converts a tool's result into the content of a CallResult, capping
// its size at limit bytes. What does not fit is cut (text) or left out
// (images, structured content, details) with a visible marker, and the full
// size is reported.
func shape(res *tools.Result, limit int, out *toolwirev1.CallResult) {
	size := len(res.StructuredContent) + len(res.Details)
	for _, c := range res.Content {
		size += len(c.Text) + len(c.Data)
	}
	out.OriginalSize = uint64(size)
	out.IsError = res.IsError
	budget := limit
	var omitted []string
	out.Content = make([]*toolwirev1.Content, 0, len(res.Content)+1)
	for _, c := range res.Content {
		if c.Data != nil {
			if len(c.Data) > budget {
				omitted = append(omitted, fmt.Sprintf("an image of %d bytes", len(c.Data)))
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
			omitted = append(omitted, fmt.Sprintf("%d bytes of text", len(c.Text)-len(text)))
		}
		budget -= len(text)
		out.Content = append(out.Content, textBlock(text))
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
		for i, o := range omitted {
			if i > 0 {
				marker += ","
			}
			marker += " " + o
		}
		out.Content = append(out.Content, textBlock(marker+"]"))
	}
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
