package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/service/httpserve"
)

// telemetry is the OpenTelemetry setup of "toolwire serve": the SDK
// providers that the OTEL_* environment and --admin-listen ask for, and the
// admin HTTP listener. A signal nobody asked for gets no SDK, and the
// engine no telemetry for it (see observer): nothing is recorded or paid for.
type telemetry struct {
	tp  *sdktrace.TracerProvider // nil unless traces are exported
	mp  *sdkmetric.MeterProvider // nil unless metrics are exported or scraped
	reg *prometheus.Registry     // what /metrics serves; nil unless --admin-listen
	log *slog.Logger
}

// exportWanted reports whether the standard OpenTelemetry environment asks
// for a signal ("TRACES" or "METRICS") to be exported: an exporter named in
// OTEL_<SIGNAL>_EXPORTER other than "none", or an OTLP endpoint. Unlike
// autoexport's own default (OTLP to localhost), nothing is exported when
// neither is set, so a plain "toolwire serve" sends nothing anywhere.
func exportWanted(signal string) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := os.Getenv("OTEL_" + signal + "_EXPORTER"); e != "" {
		return e != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// startTelemetry sets up the providers and, when adminAddr is set, the
// registry the admin listener serves at /metrics (adminListener). Shut it
// down with shutdown.
func startTelemetry(ctx context.Context, adminAddr string, log *slog.Logger) (_ *telemetry, err error) {
	t := &telemetry{log: log}
	defer func() {
		if err != nil {
			t.shutdown() // what was started before the failure
		}
	}()
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("toolwire"), semconv.ServiceVersion(version())),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	// W3C trace context and baggage, for what tools send on (HTTP, MCP).
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	if exportWanted("TRACES") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		// The sampler follows OTEL_TRACES_SAMPLER; the SDK reads it.
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		otel.SetTracerProvider(t.tp)
		log.Info("exporting traces", "exporter", exporterName("TRACES"))
	}

	var readers []sdkmetric.Option
	var registry *prometheus.Registry
	if adminAddr != "" {
		registry = prometheus.NewRegistry()
		registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(registry))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.reg = registry
	}
	if exportWanted("METRICS") {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric exporter (OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(r))
		log.Info("exporting metrics", "exporter", exporterName("METRICS"))
	}
	if len(readers) > 0 {
		t.mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		otel.SetMeterProvider(t.mp)
	}

	return t, nil
}

// adminListener listens on admin_listen, when set, for /metrics
// (Prometheus) and /debug/pprof/: a second HTTP port, answering to the
// hosts the HTTP port would (localhost, IP addresses) and to
// admin_allowed_hosts, draining for 5s at most. It is late: scrapes see
// the drain. /debug/pprof/cmdline is not served: no profile needs it, and
// it would show whatever secret the command line holds (a --store URL's
// password).
func (s *serveRun) adminListener() (listener, error) {
	if s.cfg.AdminListen == "" {
		return listener{}, nil
	}
	lis, err := listenTCP("admin_listen", s.cfg.AdminListen)
	if err != nil {
		return listener{}, err
	}
	log := s.log
	port := httpserve.New(s.cfg.adminPort(), nil, log)
	port.Handle("GET /metrics", promhttp.HandlerFor(s.tel.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}), plainRefuse)
	for path, h := range map[string]http.HandlerFunc{"/debug/pprof/": pprof.Index,
		"/debug/pprof/profile": pprof.Profile, "/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace} {
		port.Handle(path, h, plainRefuse)
	}
	log.Info("admin listening on "+lis.Addr().String(), "admin_addr", lis.Addr().String())
	return listener{name: "admin listener", lis: lis, srv: port, late: true}, nil
}

// plainRefuse writes the admin port's refusals as plain text.
func plainRefuse(w http.ResponseWriter, _ *http.Request, status int, _, message string) {
	http.Error(w, message, status)
}

// apply puts the providers into the server's configuration.
func (t *telemetry) apply(cfg *grpcserve.Config) {
	if t.tp != nil {
		cfg.TracerProvider = t.tp
	}
	if t.mp != nil {
		cfg.MeterProvider = t.mp
	}
}

// observer is the engine's telemetry: OpenTelemetry on the providers
// installed here, or none (nil) when no SDK was, at no cost to any call;
// with content, spans record arguments and results with the fields
// redact.SecretNames and redactNames (audit_redact) name redacted.
func (t *telemetry) observer(content bool, redactNames []string) engine.Observer {
	var tp trace.TracerProvider
	if t.tp != nil {
		tp = t.tp
	}
	return otelobserver.New(tp, t.meterProvider(), content, redactNames...)
}

// meterProvider is the meter provider installed here, or nil (not a nil
// *sdkmetric.MeterProvider) when none was, for what takes a
// metric.MeterProvider and records nothing without one.
func (t *telemetry) meterProvider() metric.MeterProvider {
	if t.mp == nil {
		return nil
	}
	return t.mp
}

// adminDrain is how long the admin listener, which stops once the ports
// have drained, lets its requests (a scrape, a profile) finish.
const adminDrain = 5 * time.Second

// flushTimeout bounds telemetry's last flush at shutdown.
const flushTimeout = 5 * time.Second

// shutdown flushes the providers: spans and metrics of the last batches
// still reach the collector, within flushTimeout.
func (t *telemetry) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			t.log.Warn("flushing traces", "error", err)
		}
	}
	if t.mp != nil {
		if err := t.mp.Shutdown(ctx); err != nil {
			t.log.Warn("flushing metrics", "error", err)
		}
	}
}

func exporterName(signal string) string {
	if e := os.Getenv("OTEL_" + signal + "_EXPORTER"); e != "" {
		return e
	}
	return "otlp"
}

// version is the module version the binary was built from, when known.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// instrumentReload reports whether the config file's last reload put it
// in force, as the gauge toolwire.config.last_reload_successful (1, or 0
// while rejected is set: the file on disk is not what is served), as
// Prometheus reports its own (prometheus_config_last_reload_successful),
// so that an alert sees a rejected ConfigMap rather than a log line.
func instrumentReload(mp metric.MeterProvider, rejected *atomic.Bool) error {
	if mp == nil {
		return nil
	}
	_, err := mp.Meter("github.com/toolwire/toolwire/sources/reload").Int64ObservableGauge("toolwire.config.last_reload_successful",
		metric.WithDescription("1 when the config file's last reload put it in force (or none happened yet), 0 when it was rejected and the previous config is still served."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if rejected.Load() {
				o.Observe(0)
			} else {
				o.Observe(1)
			}
			return nil
		}))
	return err
}

// instrumentStore reports, for a store whose notices go over a
// subscription (Redis), the attempts to subscribe that failed, as the
// observable counter toolwire.store.subscription_failures: while they
// fail (a user without the channel, NOPERM; a proxy without pub/sub; a
// server restarting) cancels and approvals across replicas are polled,
// so a dashboard shows what would otherwise be a log line on another
// replica.
func instrumentStore(mp metric.MeterProvider, st any) error {
	subs, ok := st.(interface{ FailedSubscriptions() int64 })
	if mp == nil || !ok {
		return nil
	}
	_, err := mp.Meter("github.com/toolwire/toolwire/store").Int64ObservableCounter("toolwire.store.subscription_failures",
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts to subscribe to the store's notices that failed; meanwhile cancels and approvals across replicas are polled."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(subs.FailedSubscriptions())
			return nil
		}))
	return err
}
