package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestServeAuditRequired: serve with audit_required, over real gRPC,
// writes each call's request entry before it runs and its outcome line
// after; with the trail's directory gone, calls are refused NOT_PERMITTED
// naming the audit trail, not run; once it is back they run again, and
// every line of the trail is whole JSON.
func TestServeAuditRequired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logs, "audit.log")
	config := writeFile(t, "toolwire.yaml", "diag: true\naudit_required: true\naudit_log: "+logPath+"\n")
	s := startServe(t, "--config", config)
	batch := func(ids ...string) []string {
		t.Helper()
		var calls []string
		for _, id := range ids {
			calls = append(calls, `{"call_id":"`+id+`","name":"echo","arguments":{"text":"hi"}}`)
		}
		got := runCmd(t, s.addr, "batch", writeFile(t, "batch.json", "["+strings.Join(calls, ",")+"]"))
		if got.err != nil && got.code != 1 {
			t.Fatalf("batch: %+v", got)
		}
		evs := events(t, got.stdout)
		for _, ev := range evs {
			if r := ev.GetResult(); r != nil && r.GetIsError() && !strings.Contains(r.GetContent()[0].GetText().GetText(), "the audit trail cannot record this call") {
				t.Errorf("%s: %s; want a refusal naming the audit trail", r.GetCallId(), r.GetContent()[0].GetText().GetText())
			}
		}
		res := results(evs)
		slices.Sort(res)
		return res
	}
	if diff := cmp.Diff([]string{"a:UNSPECIFIED", "b:UNSPECIFIED"}, batch("a", "b")); diff != "" {
		t.Errorf("calls with the trail written (-want +got):\n%s", diff)
	}
	// An outcome line is written after the result is sent: wait for both,
	// or the writer may make the file again while the folder is removed.
	waitFor(t, "a's and b's outcome lines", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), `"stage":"outcome"`) >= 2
	})
	if err := os.RemoveAll(logs); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"c:NOT_PERMITTED", "d:NOT_PERMITTED"}, batch("c", "d")); diff != "" {
		t.Errorf("calls with the trail's directory gone (-want +got):\n%s", diff)
	}
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"e:UNSPECIFIED"}, batch("e")); diff != "" {
		t.Errorf("a call once the directory is back (-want +got):\n%s", diff)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var l struct{ CallID, Stage string }
		if err := json.Unmarshal([]byte(line), &struct {
			CallID *string `json:"call_id"`
			Stage  *string `json:"stage"`
		}{&l.CallID, &l.Stage}); err != nil {
			t.Fatalf("a line of the trail is not JSON (%v): %q", err, line)
		}
		got = append(got, l.CallID+":"+l.Stage)
	}
	// The new file holds e's entry, then its outcome; c and d's outcome
	// lines went with the directory, or into this file if written later.
	if i, j := slices.Index(got, "e:request"), slices.Index(got, "e:outcome"); i < 0 || j < i {
		t.Errorf("the trail's lines %v; want e's request entry before its outcome", got)
	}
	if slices.Contains(got, "c:request") || slices.Contains(got, "d:request") {
		t.Errorf("the trail's lines %v: a refused call has a request entry", got)
	}
}
