/* sql/lease--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.3'" to load this file. \quit
