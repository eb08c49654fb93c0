package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store/memory"
)

func TestSessionRejectsBadValues(t *testing.T) {
	t.Parallel()
	s := &session{st: memory.New(memory.Options{}), scope: "x", ttl: time.Hour}
	if err := s.Set(context.Background(), "v", json.RawMessage(`{not json`)); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("Set of bad JSON = %v", err)
	}
	if err := s.Set(context.Background(), "", json.RawMessage(`1`)); err == nil {
		t.Fatal("Set with an empty name succeeded")
	}
	big := json.RawMessage(`"` + strings.Repeat("x", maxSessionValue) + `"`)
	if err := s.Set(context.Background(), "v", big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Set of a value over the limit = %v", err)
	}
	long := strings.Repeat("n", MaxIDBytes+1)
	if err := s.Set(context.Background(), long, json.RawMessage(`1`)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Set with a name over the limit = %v", err)
	}
	if _, _, err := s.Get(context.Background(), long); err == nil {
		t.Fatal("Get with a name over the limit succeeded")
	}
	if err := s.Delete(context.Background(), long); err == nil {
		t.Fatal("Delete with a name over the limit succeeded")
	}
	if n := s.st.(*memory.Store).Len(); n != 0 {
		t.Fatalf("the store holds %d entries after refused Sets", n)
	}
	if _, ok, err := s.Get(context.Background(), "v"); ok || err != nil {
		t.Fatalf("after refused Sets, Get = %v, %v; want unset", ok, err)
	}
}
