"""A small service that embeds pgqueue: users, and a welcome email sent by a background job."""
