package server

import (
	"context"
	"flag"

	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/server/services/pruner"
	"github.com/worker-gateway/gateway/server/services/queuevacuum"
	"github.com/worker-gateway/gateway/server/services/scheduletimer"
	"github.com/worker-gateway/gateway/server/services/sweeper"
	"github.com/worker-gateway/gateway/server/services/webhookdeliver"
	"github.com/worker-gateway/gateway/server/services/webhookwatch"
	"github.com/worker-gateway/gateway/store"
)

// ServiceSpec is one entry of the list of a replica's background services.
type ServiceSpec struct {
	// Flags registers the service's own flags, into the configuration
	// (nil: it has none). RegisterServiceFlags calls it for every entry of
	// DefaultServices.
	Flags func(fs *flag.FlagSet, cfg *Config)
	// Service builds the service a replica runs, or answers nil when the
	// replica's configuration leaves it off. The request path reaches a
	// service only through the group (services.DeadlineWatcher,
	// services.GrantCounter), and the replica serves its metrics
	// (services.Metered): nothing else names it.
	Service func(s *Server) services.Service
}

// DefaultServices is the one list of a replica's background services, in
// the order they start. The replica's LISTEN connection wakes each by the
// wake-up kinds it subscribes to (services.Subscriber), and Run stops them
// all when its context ends. Adding a service is adding an entry here.
var DefaultServices = []ServiceSpec{
	{Flags: func(fs *flag.FlagSet, cfg *Config) {
		sweeper.RegisterFlags(fs, &cfg.SweepIdleInterval, &cfg.SweepDormantInterval)
	}, Service: func(s *Server) services.Service {
		return sweeper.New(s.store, sweeper.Config{IdleInterval: s.cfg.SweepIdleInterval, DormantInterval: s.cfg.SweepDormantInterval,
			Batch: s.cfg.SweepBatch, Uploads: s.cfg.Artifacts.Backend, UploadSessionTTL: s.cfg.Artifacts.SessionTTL,
			ArtifactKeyPrefix: artifactKeyPrefix}, s.serviceUnit(sweeper.Name))
	}},
	{Flags: func(fs *flag.FlagSet, cfg *Config) {
		pruner.RegisterFlags(fs, &cfg.PruneInterval, &cfg.TaskRetention, &cfg.UploadRetention, &cfg.AuditRetention)
	}, Service: func(s *Server) services.Service {
		if s.cfg.PruneInterval <= 0 {
			return nil
		}
		return pruner.New(s.store, pruner.Config{Interval: s.cfg.PruneInterval, Retention: store.PruneParams{
			TaskRetention: s.cfg.TaskRetention, UploadRetention: s.cfg.UploadRetention,
			AuditRetention: s.cfg.AuditRetention, Batch: s.cfg.SweepBatch}}, s.serviceUnit(pruner.Name))
	}},
	{Flags: func(fs *flag.FlagSet, cfg *Config) { queuevacuum.RegisterFlags(fs, &cfg.QueueVacuumEvery) }, Service: func(s *Server) services.Service {
		return queuevacuum.New(s.store, s.cfg.QueueVacuumEvery, s.serviceUnit(queuevacuum.Name))
	}},
	{Flags: func(fs *flag.FlagSet, cfg *Config) { scheduletimer.RegisterFlags(fs, &cfg.ScheduleTimer) }, Service: func(s *Server) services.Service {
		if !s.cfg.ScheduleTimer {
			return nil
		}
		return scheduletimer.New(s.store, s.serviceUnit(scheduletimer.Name))
	}},
	{Flags: func(fs *flag.FlagSet, cfg *Config) { webhookdeliver.RegisterFlags(fs, &cfg.Webhooks) }, Service: func(s *Server) services.Service {
		if !s.cfg.Webhooks.Deliver {
			return nil
		}
		return webhookdeliver.New(s.store, s.cfg.Webhooks, s.cfg.Secrets, s.serviceUnit(webhookdeliver.Name))
	}},
	{Service: func(s *Server) services.Service {
		if !s.cfg.Webhooks.Deliver {
			return nil
		}
		return webhookwatch.New(s.store, s.onlineWindow, s.serviceUnit(webhookwatch.Name))
	}},
	{Service: func(s *Server) services.Service {
		return securityAuditWriter{Unit: s.serviceUnit("security-audit"), throttle: s.securityEvents}
	}},
	{Service: func(s *Server) services.Service {
		return webhookSecretSealing{Unit: s.serviceUnit("webhook-secret-sealing"), s: s}
	}},
}

// RegisterServiceFlags registers the flags of every service of
// DefaultServices on fs, into cfg (serve's flag set).
func RegisterServiceFlags(fs *flag.FlagSet, cfg *Config) {
	for _, spec := range DefaultServices {
		if spec.Flags != nil {
			spec.Flags(fs, cfg)
		}
	}
}

// serviceUnit names a service of this replica: its logs and its spans.
func (s *Server) serviceUnit(name string) services.Unit {
	return services.NewUnit(name, s.logger, s.cfg.TracerProvider)
}

// buildServices groups the services of the configured list.
func (s *Server) buildServices() (*services.Group, error) {
	list := s.cfg.Services
	if list == nil {
		list = DefaultServices
	}
	built := make([]services.Service, 0, len(list))
	for _, spec := range list {
		built = append(built, spec.Service(s))
	}
	return services.NewGroup(s.logger, built...)
}

// securityAuditWriter writes the security throttle's count rows as their
// windows end, and the pending ones on shutdown.
type securityAuditWriter struct {
	services.Unit
	throttle *securityThrottle
}

func (w securityAuditWriter) Run(ctx context.Context) error {
	w.throttle.run(ctx)
	return nil
}

// webhookSecretSealing is the start-up step sealing webhook signing secrets
// (sealWebhookSecrets); it returns once done.
type webhookSecretSealing struct {
	services.Unit
	s *Server
}

func (w webhookSecretSealing) Run(ctx context.Context) error {
	ctx, span := w.Iteration(ctx)
	defer span.End()
	sealWebhookSecrets(ctx, w.s.store, w.s.cfg.Secrets, w.Logger())
	return nil
}
