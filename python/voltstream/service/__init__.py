"""Running voltstream as a service: how a run stops on a signal (`shutdown`), what
its exit status says (`exit_status`), where its log lines go (`logs`), and the
progress bar of the offline verbs (`progress`). docs/operations.md, "Running as a
service", is the operator's side of it."""
