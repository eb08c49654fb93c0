package suggest

import "testing"

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"max_calls", "max_calls", 0}, {"max_cals", "max_calls", 1},
		{"methd", "method", 1}, {"kitten", "sitting", 3}, {"", "abc", 3},
	} {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	names := []string{"read_file", "write_file", "edit_file", "echo", "list_files"}
	for _, tt := range []struct{ name, want string }{
		{"reed_file", "read_file"}, {"READ_FILE", "read_file"}, {"ech", "echo"}, {"list_file", "list_files"},
		{"delete_everything", ""}, {"", ""},
	} {
		got, ok := Nearest(tt.name, names)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("Nearest(%q) = %q, %v; want %q", tt.name, got, ok, tt.want)
		}
	}
}
