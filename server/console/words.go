package console

import "github.com/worker-gateway/gateway/server/api"

// pendingReasonText says in words why a queued task is not leased yet
// (the contract's PendingReason).
func pendingReasonText(r *api.PendingReason) string {
	if r == nil {
		return ""
	}
	switch *r {
	case api.NoAssignedWorker:
		return "No worker is assigned to this task's organization: assign one (Organizations) before it can run."
	case api.PluginNotAdvertised:
		return "None of the organization's workers advertises the plugin this task needs."
	case api.NoOnlineWorker:
		return "No worker that could take this task is online: the organization's workers are offline, disabled or revoked."
	case api.CapabilityMismatch:
		return "The online workers lack the capabilities this task requires."
	case api.LabelMismatch:
		return "No online worker with the required capabilities has labels that match this task's label selector."
	case api.PinnedWorkerUnavailable:
		return "The worker this task is pinned to cannot take it now (unassigned, disabled, revoked, offline or of another type)."
	case api.CapacityFull:
		return "Every eligible worker is busy at its capacity: the task will run when one frees a slot."
	case api.ScheduledLater:
		return "The task is not due yet: it becomes available at its scheduled time."
	case api.RetryBackoff:
		return "The last attempt failed; the task waits out its retry backoff before it is leased again."
	}
	return string(*r)
}

// eligibilityText says in words whether a worker can take an
// organization's tasks, and why not.
func eligibilityText(r api.OrganizationWorkerReason) string {
	switch r {
	case api.Eligible:
		return "Eligible: online, enabled and with free capacity."
	case api.Revoked:
		return "Not eligible: the worker is revoked."
	case api.Disabled:
		return "Not eligible: the worker is disabled."
	case api.AssignmentDisabled:
		return "Not eligible: its assignment to this organization is disabled."
	case api.Offline:
		return "Not eligible: the worker is offline (not seen within three heartbeat intervals)."
	case api.AtCapacity:
		return "Not eligible now: it runs as many tasks as it may."
	}
	return string(r)
}

// changeKinds are the contract's exposure change kinds, in the order the
// filter offers them.
var changeKinds = []api.ChangeKind{api.AssetAppeared, api.AssetDisappeared, api.PortOpened, api.PortClosed,
	api.CertificateChanged, api.HttpStatusChanged}

// changeKindText names an exposure change kind in words.
func changeKindText(k api.ChangeKind) string {
	switch k {
	case api.AssetAppeared:
		return "Asset appeared"
	case api.AssetDisappeared:
		return "Asset disappeared"
	case api.PortOpened:
		return "Port opened"
	case api.PortClosed:
		return "Port closed"
	case api.CertificateChanged:
		return "Certificate changed"
	case api.HttpStatusChanged:
		return "HTTP status changed"
	}
	return string(k)
}
