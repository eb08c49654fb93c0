package main

import (
	"bytes"
	"fmt"
	"html"
	"time"
)

// bar is one bar of a chart panel.
type bar struct {
	label string
	value float64
	text  string
}

// svg draws the run's headline figures as three panels of horizontal bars:
// p50 latency at one caller, throughput at many, and cost per call by batch
// size.
func (r *report) svg() []byte {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	var lat, thr, per []bar
	for _, e := range r.Echo {
		if e.Callers == 1 {
			lat = append(lat, bar{e.System, us(e.Latency.P50), fmt.Sprintf("%.1f µs", us(e.Latency.P50))})
		} else {
			thr = append(thr, bar{e.System, e.PerSecond, fmt.Sprintf("%.0f calls/s", e.PerSecond)})
		}
	}
	for _, s := range r.Sizes {
		per = append(per, bar{fmt.Sprintf("%d calls", s.Calls), us(s.PerCall), fmt.Sprintf("%.1f µs", us(s.PerCall))})
	}
	panels := []struct {
		title string
		bars  []bar
	}{
		{"echo p50 latency, one caller (lower is better)", lat},
		{fmt.Sprintf("echo throughput, %d callers (higher is better)", r.Callers), thr},
		{"toolwire cost per call by batch size (lower is better)", per},
	}
	const width, labelW, barW, rowH, gap = 640, 130, 360, 22, 36
	height := 10
	for _, p := range panels {
		height += gap + rowH*len(p.bars)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	y := 10
	colors := []string{"#8c8c8c", "#2f6fb0", "#d9822b", "#3a9a5b", "#8e5bb5", "#b0413e"}
	for _, p := range panels {
		y += gap
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y-10, html.EscapeString(p.title))
		top := 0.0
		for _, x := range p.bars {
			top = max(top, x.value)
		}
		for i, x := range p.bars {
			w := 0.0
			if top > 0 {
				w = x.value / top * barW
			}
			fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`, y+15, html.EscapeString(x.label))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelW, y+3, w, rowH-6, colors[i%len(colors)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelW)+w+6, y+15, html.EscapeString(x.text))
			y += rowH
		}
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
