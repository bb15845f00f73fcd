"""Text beside the video: subtitle files (:mod:`~specvlm.text.subtitles`) and how a transcript
enters the prompt (:mod:`~specvlm.text.prompting`)."""
