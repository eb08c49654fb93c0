package main

import (
	"fmt"
	"io"
	"iter"
	"strings"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"golang.org/x/term"
)

// pipeProgressEvery is the least time between two progress lines on a pipe
// or file; reports in between are held, and the last one held is printed
// before the result, so the final state is always seen.
const pipeProgressEvery = time.Second

// progressView describes a call's start, progress and end on w. On a
// terminal, the status is one line redrawn in place; elsewhere it is one line
// per report, at most one per pipeProgressEvery.
type progressView struct {
	w     io.Writer
	tty   bool
	width int // the terminal's width; longer status lines are cut to fit

	now     func() time.Time
	printed time.Time // when the last progress line was printed (pipe)
	held    string    // a progress line not printed yet (pipe)
	status  bool      // a status line is on screen (terminal)
	midLine bool      // the tool's output so far ends in the middle of a line (terminal)
}

func newProgressView(w io.Writer) *progressView {
	v := &progressView{w: w, tty: isTerminal(w), width: 80, now: time.Now}
	if v.tty {
		if width, _, err := term.GetSize(int(w.(interface{ Fd() uintptr }).Fd())); err == nil && width > 1 {
			v.width = width
		}
	}
	return v
}

// show passes events through, describing them as they arrive.
func (v *progressView) show(seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error]) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	return func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		defer v.clear()
		for ev, err := range seq {
			switch e := ev.GetEvent().(type) {
			case *toolwirev1.ExecuteBatchResponse_Started:
				if v.tty {
					v.report("started " + e.Started.GetCallId())
				} else {
					v.line("started " + e.Started.GetCallId())
				}
			case *toolwirev1.ExecuteBatchResponse_Progress:
				p := e.Progress
				if p.Output != "" {
					v.clear()
					io.WriteString(v.w, p.Output)
					v.midLine = !strings.HasSuffix(p.Output, "\n")
				}
				if p.Progress != nil || p.Message != "" {
					v.report(strings.TrimSuffix(fmt.Sprintf("progress %s%s", fraction(p), p.Message), ": "))
				}
			case *toolwirev1.ExecuteBatchResponse_Result:
				v.flush()
				v.line(fmt.Sprintf("finished %s in %s", e.Result.GetCallId(), e.Result.GetDuration().AsDuration().Round(time.Millisecond)))
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

// report shows a status line: in place on a terminal, else throttled.
func (v *progressView) report(s string) {
	if v.tty {
		if v.midLine {
			// Redrawing would erase the tool's unfinished output line.
			io.WriteString(v.w, "\n")
			v.midLine = false
		}
		s, _, _ = strings.Cut(s, "\n")
		if r := []rune(s); len(r) >= v.width {
			s = string(r[:v.width-1])
		}
		fmt.Fprintf(v.w, "\r\x1b[K%s", s)
		v.status = true
		return
	}
	if now := v.now(); v.printed.IsZero() || now.Sub(v.printed) >= pipeProgressEvery {
		v.held = ""
		v.printed = now
		fmt.Fprintln(v.w, s)
		return
	}
	v.held = s
}

// line prints s as a line of its own, replacing the status line.
func (v *progressView) line(s string) {
	v.clear()
	fmt.Fprintln(v.w, s)
}

// flush prints the progress line held back by the throttle, if any.
func (v *progressView) flush() {
	if v.held != "" {
		fmt.Fprintln(v.w, v.held)
		v.held = ""
	}
}

// clear erases the status line from a terminal.
func (v *progressView) clear() {
	if v.status {
		io.WriteString(v.w, "\r\x1b[K")
		v.status = false
	}
}

// fraction formats "progress/total: ", or "" when no progress is reported.
func fraction(p *toolwirev1.CallProgress) string {
	switch {
	case p.Progress == nil:
		return ""
	case p.Total == nil:
		return fmt.Sprintf("%g: ", p.GetProgress())
	default:
		return fmt.Sprintf("%g/%g: ", p.GetProgress(), p.GetTotal())
	}
}
