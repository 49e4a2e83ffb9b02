"""Files shipped with lagd (links into config/ and systemd/ in the source): ``lagctl config example``."""
