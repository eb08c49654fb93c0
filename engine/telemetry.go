package engine

// ScopeName is the instrumentation scope of toolwire's spans and metrics.
// It still names the package they came from before the engine moved out
// of service/: dashboards and alerts select on it, so it stays.
const ScopeName = "github.com/toolwire/toolwire/service"
