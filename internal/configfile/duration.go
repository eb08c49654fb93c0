package configfile

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration as config and batch files write it: a string
// such as "30s" or "1m30s". It is the one such type: an HTTP tool's timeout
// (httpsource.Duration) and a batch file's are Durations, and the
// time.Duration fields of the feature Configs are read as Durations (see
// Decode), so every duration a file holds is read, and refused, alike.
type Duration time.Duration

// UnmarshalJSON parses a duration string; sigs.k8s.io/yaml turns YAML into
// JSON before decoding, so this serves YAML too.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration as a string such as \"30s\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as \"30s\" or \"1m30s\", not %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as the files do, as a string such as
// "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}
