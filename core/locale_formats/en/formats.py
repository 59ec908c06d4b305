"""How the admin and the staff pages write dates (FORMAT_MODULE_PATH): ISO-like, to the second,
with the zone they are in (the staff member's, core.timezones): "2026-12-03 17:36:23 CET".
The staff timelines write the same ("Y-m-d H:i:s"). Django's English default has no seconds
and a.m./p.m., and ISO strings from JSON had microseconds."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
